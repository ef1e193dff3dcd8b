import { createWriteStream } from 'node:fs';
import { chmod, lchown, link, lstat, lutimes, mkdir, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { WarrenError } from '@warren/api';
import { shiftId, type IdMap } from './idmap.js';
import { readTar, type TarEntry } from './tar.js';

/** File-system calls Node lacks, done by the host helper (paths are absolute host paths). */
export interface FsOps {
  mknod(path: string, type: 'char' | 'block' | 'fifo', mode: number, major: number, minor: number): Promise<void>;
  /** lsetxattr: never follows a symlink. */
  setxattr(path: string, name: string, value: Buffer): Promise<void>;
}

/** The overlayfs markers a layer in overlay form uses (what mkfs.erofs then stores). */
export const OPAQUE_XATTR = 'trusted.overlay.opaque';

/** Extended attributes a layer may carry; trusted.* could forge overlay metadata, so never. */
function xattrAllowed(name: string): boolean {
  return name.startsWith('user.') || name === 'security.capability';
}

function bad(msg: string): WarrenError {
  return new WarrenError('invalid_argument', msg);
}

/** A member path as components inside the layer; absolute paths and `..` are refused. */
export function layerPath(raw: string): string[] {
  if (raw.startsWith('/')) throw bad(`tar member has an absolute path: ${raw}`);
  const parts = raw.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw bad(`tar member path leaves the layer: ${raw}`);
  if (raw.includes('\0')) throw bad('tar member path contains NUL');
  return parts;
}

export interface UnpackResult {
  /** sha256 of the uncompressed tar stream (an OCI layer's diffID). */
  diffId: string;
  bytes: number;
  entries: number;
}

/**
 * Unpacks a layer tar into an empty directory in overlay form: OCI whiteouts (`.wh.NAME`)
 * become 0:0 character devices, opaque markers (`.wh..wh..opq`) the overlay's opaque xattr;
 * ownership is shifted into the sandbox id range; modes, times, hard links, symlinks, device
 * nodes and user xattrs are kept. Nothing is ever written through a symlink: every parent of a
 * member must be a directory this layer made (symlinks in the tar stay data, to be resolved
 * inside a sandbox's root).
 */
/**
 * Passes a byte stream through, refusing it past `max` bytes (payload_too_large naming `what`):
 * what is unpacked is bounded, not only what was sent (a gzip bomb is small on the wire).
 */
export async function* capped(source: AsyncIterable<Buffer>, max: number, what = 'the layer'): AsyncGenerator<Buffer> {
  let n = 0;
  for await (const c of source) {
    n += c.length;
    if (n > max) throw new WarrenError('payload_too_large', `${what} unpacks to more than ${max} bytes`, { maxBytes: max });
    yield c;
  }
}

export async function unpackLayer(source: AsyncIterable<Buffer>, dir: string, o: { idMap: IdMap; ops: FsOps; maxBytes?: number }): Promise<UnpackResult> {
  if (o.maxBytes !== undefined) source = capped(source, o.maxBytes);
  /** What each path in the layer is, as made so far ('' is the root). */
  const kinds = new Map<string, TarEntry['type'] | 'whiteout'>([['', 'dir']]);
  const dirTimes: Array<[string, number]> = [];
  const host = (parts: string[]): string => join(dir, ...parts);

  const ensureParents = async (parts: string[]): Promise<void> => {
    for (let i = 1; i < parts.length; i++) {
      const key = parts.slice(0, i).join('/');
      const k = kinds.get(key);
      if (k === 'dir') continue;
      if (k !== undefined) throw bad(`tar member ${parts.join('/')} goes through ${key}, which is not a directory`);
      await mkdir(host(parts.slice(0, i)), { mode: 0o755 });
      await lchown(host(parts.slice(0, i)), o.idMap.hostStart, o.idMap.hostStart);
      kinds.set(key, 'dir');
    }
  };

  /** Removes whatever this layer put at a path (and below it) before something replaces it. */
  const clear = async (parts: string[]): Promise<void> => {
    const key = parts.join('/');
    if (!kinds.has(key)) return;
    await rm(host(parts), { recursive: true, force: true });
    for (const k of [...kinds.keys()]) if (k === key || k.startsWith(key + '/')) kinds.delete(k);
  };

  const owner = async (p: string, e: { uid: number; gid: number }): Promise<void> => {
    await lchown(p, shiftId(e.uid, o.idMap), shiftId(e.gid, o.idMap));
  };

  const result = await readTar(source, async (e, body) => {
    const parts = layerPath(e.path);
    const base = parts[parts.length - 1] ?? '';
    if (base.startsWith('.wh.')) {
      if (e.type !== 'file' && e.type !== 'link') throw bad(`whiteout ${e.path} is not a plain file`);
      await ensureParents(parts);
      const parent = parts.slice(0, -1);
      if (base === '.wh..wh..opq') {
        await o.ops.setxattr(host(parent), OPAQUE_XATTR, Buffer.from('y'));
        return;
      }
      const target = [...parent, base.slice(4)];
      if (target[target.length - 1] === '' || base === '.wh.') throw bad(`empty whiteout name: ${e.path}`);
      await clear(target);
      await o.ops.mknod(host(target), 'char', 0, 0, 0);
      await lchown(host(target), o.idMap.hostStart, o.idMap.hostStart);
      kinds.set(target.join('/'), 'whiteout');
      return;
    }
    if (parts.length === 0) {
      // "./": the layer's root directory itself.
      if (e.type !== 'dir') throw bad('the layer root is not a directory');
      await owner(dir, e);
      await chmod(dir, e.mode);
      dirTimes.push([dir, e.mtime]);
      return;
    }
    await ensureParents(parts);
    const p = host(parts);
    const key = parts.join('/');
    if (e.type === 'dir') {
      if (kinds.get(key) !== 'dir') {
        await clear(parts);
        await mkdir(p);
        kinds.set(key, 'dir');
      }
    } else {
      await clear(parts);
      switch (e.type) {
        case 'file':
          await pipeline(Readable.from(body), createWriteStream(p, { flags: 'wx', mode: 0o600 }));
          break;
        case 'link': {
          const target = layerPath(e.linkname);
          const tk = kinds.get(target.join('/'));
          if (tk === undefined || tk === 'dir' || tk === 'whiteout')
            throw bad(`hard link ${e.path} points at ${e.linkname}, which is not a file of this layer`);
          await link(host(target), p);
          kinds.set(key, 'link');
          return; // a hard link shares its target's inode: owner, mode and times are the target's
        }
        case 'symlink':
          if (e.linkname.includes('\0') || e.linkname === '') throw bad(`symlink ${e.path} has no target`);
          await symlink(e.linkname, p);
          break;
        default:
          await o.ops.mknod(p, e.type, e.mode, e.devmajor, e.devminor);
      }
      kinds.set(key, e.type);
    }
    await owner(p, e);
    if (e.type !== 'symlink') await chmod(p, e.mode);
    for (const [name, value] of e.xattrs) if (xattrAllowed(name)) await o.ops.setxattr(p, name, value);
    if (e.type === 'dir') dirTimes.push([p, e.mtime]);
    else await lutimes(p, e.mtime, e.mtime);
  });
  // Directory times last: making their entries changed them.
  for (const [p, t] of dirTimes.reverse()) if (await lstat(p).catch(() => null)) await lutimes(p, t, t);
  return { diffId: result.digest, bytes: result.bytes, entries: result.entries };
}
