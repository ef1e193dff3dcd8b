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

  private sid(caller: Caller, id: string): string {
    return this.sandboxes.live(caller, id).id;
  }

  read(caller: Caller, id: string, path: string): Promise<FileBody> {
    return this.edge.readFile(this.sid(caller, id), path);
  }

  write(caller: Caller, id: string, path: string, body: FileBody, mode?: number): Promise<void> {
    return this.edge.writeFile(this.sid(caller, id), path, body, mode);
  }

  /** A path's entry (a symlink is not followed). */
  stat(caller: Caller, id: string, path: string): Promise<FileEntry> {
    return this.edge.statPath(this.sid(caller, id), path);
  }

  /** A directory's entries, `depth` levels down. */
  list(caller: Caller, id: string, path: string, depth: number): Promise<FileEntry[]> {
    return this.edge.listDir(this.sid(caller, id), path, depth);
  }

  remove(caller: Caller, id: string, path: string, recursive: boolean): Promise<void> {
    return this.edge.removePath(this.sid(caller, id), path, recursive);
  }

  makeDir(caller: Caller, id: string, path: string): Promise<void> {
    return this.edge.makeDir(this.sid(caller, id), path);
  }

  move(caller: Caller, id: string, from: string, to: string): Promise<void> {
    return this.edge.movePath(this.sid(caller, id), from, to);
  }

  /** Extracts a tar stream into a directory (made if missing). */
  putArchive(caller: Caller, id: string, dir: string, body: FileBody): Promise<void> {
    return this.edge.putArchive(this.sid(caller, id), dir, body);
  }

  /** A tar stream of a directory. */
  getArchive(caller: Caller, id: string, dir: string): Promise<FileBody> {
    return this.edge.getArchive(this.sid(caller, id), dir);
  }
}
