import type { FileEntry } from '@warren/api';
import type { EdgeApi, FileBody } from '@warren/edge';
import type { Caller, SandboxService } from './sandboxes.js';

/** Files and archives in the caller's live sandboxes (paths resolve inside the sandbox, on its edge). */
export class FileService {
  constructor(
    private readonly edge: EdgeApi,
    private readonly sandboxes: SandboxService,
    /** The largest file a write or an archive may put into a sandbox (the node's), in bytes. */
    readonly maxFileBytes: number,
  ) {}

  private async sid(caller: Caller, id: string): Promise<string> {
    return (await this.sandboxes.live(caller, id)).id;
  }

  async read(caller: Caller, id: string, path: string): Promise<FileBody> {
    return this.edge.readFile(await this.sid(caller, id), path);
  }

  async write(caller: Caller, id: string, path: string, body: FileBody, mode?: number): Promise<void> {
    return this.edge.writeFile(await this.sid(caller, id), path, body, mode);
  }

  /** A path's entry (a symlink is not followed). */
  async stat(caller: Caller, id: string, path: string): Promise<FileEntry> {
    return this.edge.statPath(await this.sid(caller, id), path);
  }

  /** A directory's entries, `depth` levels down. */
  async list(caller: Caller, id: string, path: string, depth: number): Promise<FileEntry[]> {
    return this.edge.listDir(await this.sid(caller, id), path, depth);
  }

  async remove(caller: Caller, id: string, path: string, recursive: boolean): Promise<void> {
    return this.edge.removePath(await this.sid(caller, id), path, recursive);
  }

  async makeDir(caller: Caller, id: string, path: string): Promise<void> {
    return this.edge.makeDir(await this.sid(caller, id), path);
  }

  async move(caller: Caller, id: string, from: string, to: string): Promise<void> {
    return this.edge.movePath(await this.sid(caller, id), from, to);
  }

  /** Extracts a tar stream into a directory (made if missing). */
  async putArchive(caller: Caller, id: string, dir: string, body: FileBody): Promise<void> {
    return this.edge.putArchive(await this.sid(caller, id), dir, body);
  }

  /** A tar stream of a directory. */
  async getArchive(caller: Caller, id: string, dir: string): Promise<FileBody> {
    return this.edge.getArchive(await this.sid(caller, id), dir);
  }
}
