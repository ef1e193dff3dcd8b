import type { ExecRequest, FileEntry } from '@warren/api';
import { WarrenError } from '@warren/api';
import { BUSYBOX } from '../init/platform.js';
import * as ch from '../init/channel.js';
import type { AgentConnect } from '../init/call.js';
import type { Command } from './command.js';
import { archiveStream, extractArchive } from './archive.js';
import type { Live } from './live.js';

/** What the file operations need of the edge: a sandbox marked active (and resumed), and exec. */
export interface FileOpsDeps {
  touch(id: string): Promise<Live>;
  exec(id: string, req: ExecRequest): Promise<Command>;
  maxFileBytes: number;
}

/**
 * File operations inside a sandbox, through its init (every path resolved inside the sandbox's
 * root, nothing outside it): read, write, stat, list, remove, mkdir, move, and tar in and out.
 */
export class SandboxFiles {
  constructor(private readonly d: FileOpsDeps) {}

  private async sock(id: string): Promise<AgentConnect> {
    return (await this.d.touch(id)).sb.connect;
  }

  async read(id: string, path: string): Promise<AsyncIterable<Buffer>> {
    return ch.openRead(await this.sock(id), path);
  }

  async write(id: string, path: string, data: AsyncIterable<Buffer> | Buffer, mode?: number): Promise<void> {
    const l = await this.d.touch(id);
    await ch.writeFileFrom(l.sb.connect, path, data, { mode, maxBytes: this.d.maxFileBytes, user: l.spec.user ?? undefined });
  }

  /** A path's entry (a symlink is not followed). */
  async stat(id: string, path: string): Promise<FileEntry> {
    return ch.statPath(await this.sock(id), path);
  }

  /** A directory's entries, `depth` levels down. */
  async list(id: string, path: string, depth: number): Promise<FileEntry[]> {
    return ch.listDir(await this.sock(id), path, depth);
  }

  /** Sets a path's extended attributes under a prefix of the user namespace (the others under it go). */
  async setAttrs(id: string, path: string, prefix: string, attrs: Record<string, string>): Promise<void> {
    await ch.setAttrs(await this.sock(id), path, prefix, attrs);
  }

  async remove(id: string, path: string, recursive: boolean): Promise<void> {
    if (path.replace(/\/+$/, '') === '') throw new WarrenError('invalid_argument', 'refusing to delete /');
    await ch.removePath(await this.sock(id), path, recursive);
  }

  async mkdir(id: string, path: string): Promise<void> {
    const l = await this.d.touch(id);
    await ch.makeDir(l.sb.connect, path, l.spec.user ?? undefined);
  }

  async move(id: string, from: string, to: string): Promise<void> {
    const sock = await this.sock(id);
    try {
      await ch.movePath(sock, from, to);
    } catch (e) {
      // rename(2) cannot move a directory that lives in a lower layer; a copying move can.
      if (!(e instanceof WarrenError) || e.details.errno !== 18) throw e;
      const cmd = await this.d.exec(id, { cmd: [BUSYBOX, 'mv', '-f', '--', from, to], user: 'root', timeoutMs: 600_000 });
      const end = await cmd.wait();
      if (end.type !== 'exit' || end.exitCode !== 0) throw new WarrenError('internal', `move failed: ${cmd.text('stderr').trim().slice(0, 500)}`, { from, to });
    }
  }

  /** Extracts a tar stream into a directory (made if missing) with the platform's own tar. */
  async putArchive(id: string, dir: string, body: AsyncIterable<Buffer>): Promise<void> {
    const l = await this.d.touch(id);
    await extractArchive(l.sb.connect, dir, body, { user: l.spec.user ?? undefined, maxBytes: this.d.maxFileBytes });
  }

  /** A tar stream of a directory. */
  async getArchive(id: string, dir: string): Promise<AsyncIterable<Buffer>> {
    return archiveStream(await this.sock(id), dir);
  }
}
