import type { FileEntry } from '@warren/api';
import type { FileBody } from '@warren/edge';
import type { Caller, SandboxService } from './sandboxes.js';

/** Files and archives in the caller's live sandboxes (paths resolve inside the sandbox, on its edge). */
export class FileService {
  constructor(
    private readonly sandboxes: SandboxService,
    /** The largest file a write or an archive may put into a sandbox (the node's), in bytes. */
    readonly maxFileBytes: number,
  ) {}

  read(caller: Caller, id: string, path: string): Promise<FileBody> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.readFile(sid, path));
  }

  write(caller: Caller, id: string, path: string, body: FileBody, mode?: number): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.writeFile(sid, path, body, mode));
  }

  /** A path's entry (a symlink is not followed). */
  stat(caller: Caller, id: string, path: string): Promise<FileEntry> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.statPath(sid, path));
  }

  /** A directory's entries, `depth` levels down. */
  list(caller: Caller, id: string, path: string, depth: number): Promise<FileEntry[]> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.listDir(sid, path, depth));
  }

  /** Makes a path's extended attributes under a prefix of the user namespace exactly these. */
  setAttrs(caller: Caller, id: string, path: string, prefix: string, attrs: Record<string, string>): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.setAttrs(sid, path, prefix, attrs));
  }

  remove(caller: Caller, id: string, path: string, recursive: boolean): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.removePath(sid, path, recursive));
  }

  makeDir(caller: Caller, id: string, path: string): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.makeDir(sid, path));
  }

  move(caller: Caller, id: string, from: string, to: string): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.movePath(sid, from, to));
  }

  /** Extracts a tar stream into a directory (made if missing). */
  putArchive(caller: Caller, id: string, dir: string, body: FileBody): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.putArchive(sid, dir, body));
  }

  /** A tar stream of a directory. */
  getArchive(caller: Caller, id: string, dir: string): Promise<FileBody> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.getArchive(sid, dir));
  }
}
