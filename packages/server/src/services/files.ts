import type { FileEntry } from '@warren/api';
import type { EdgeApi, FileBody } from '@warren/edge';
import type { Caller, SandboxService } from './sandboxes.js';

/** Files and archives in the caller's live sandboxes (paths resolve inside the sandbox, on its edge). */
export class FileService {
  constructor(
    private readonly sandboxes: SandboxService,
    /** The largest file a write or an archive may put into a sandbox (the node's), in bytes. */
    readonly maxFileBytes: number,
  ) {}

  /** The caller's live sandbox and its edge. */
  private at(caller: Caller, id: string): Promise<{ sid: string; edge: EdgeApi }> {
    return this.sandboxes.reach(caller, id);
  }

  async read(caller: Caller, id: string, path: string): Promise<FileBody> {
    const { sid, edge } = await this.at(caller, id);
    return edge.readFile(sid, path);
  }

  async write(caller: Caller, id: string, path: string, body: FileBody, mode?: number): Promise<void> {
    const { sid, edge } = await this.at(caller, id);
    return edge.writeFile(sid, path, body, mode);
  }

  /** A path's entry (a symlink is not followed). */
  async stat(caller: Caller, id: string, path: string): Promise<FileEntry> {
    const { sid, edge } = await this.at(caller, id);
    return edge.statPath(sid, path);
  }

  /** A directory's entries, `depth` levels down. */
  async list(caller: Caller, id: string, path: string, depth: number): Promise<FileEntry[]> {
    const { sid, edge } = await this.at(caller, id);
    return edge.listDir(sid, path, depth);
  }

  /** Makes a path's extended attributes under a prefix of the user namespace exactly these. */
  async setAttrs(caller: Caller, id: string, path: string, prefix: string, attrs: Record<string, string>): Promise<void> {
    const { sid, edge } = await this.at(caller, id);
    return edge.setAttrs(sid, path, prefix, attrs);
  }

  async remove(caller: Caller, id: string, path: string, recursive: boolean): Promise<void> {
    const { sid, edge } = await this.at(caller, id);
    return edge.removePath(sid, path, recursive);
  }

  async makeDir(caller: Caller, id: string, path: string): Promise<void> {
    const { sid, edge } = await this.at(caller, id);
    return edge.makeDir(sid, path);
  }

  async move(caller: Caller, id: string, from: string, to: string): Promise<void> {
    const { sid, edge } = await this.at(caller, id);
    return edge.movePath(sid, from, to);
  }

  /** Extracts a tar stream into a directory (made if missing). */
  async putArchive(caller: Caller, id: string, dir: string, body: FileBody): Promise<void> {
    const { sid, edge } = await this.at(caller, id);
    return edge.putArchive(sid, dir, body);
  }

  /** A tar stream of a directory. */
  async getArchive(caller: Caller, id: string, dir: string): Promise<FileBody> {
    const { sid, edge } = await this.at(caller, id);
    return edge.getArchive(sid, dir);
  }
}
