import type { IncomingMessage, ServerResponse } from 'node:http';
import { posix } from 'node:path';
import type { FileEntry } from '@warren/api';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';
import { ConnectError } from './connect.js';
import type { Owners } from './owners.js';
import { userName } from './requests.js';

/** A sandbox's agent as E2B's SDKs reach it: who calls, in which sandbox, as which user. */
export interface Agent {
  /** The key the call's access token was given to. */
  caller: Caller;
  id: string;
  /** The user named by the call's Basic authorization (none: the sandbox's own). */
  user: string | undefined;
  /** The sandbox's own user (its create's; none: the image's, root for E2B's purposes). */
  defaultUser: string | null;
}

/** What a Connect-RPC call answers: a message (unary) or nothing (it streamed its answer). */
export type Call = (d: RouteDeps, a: Agent, msg: Record<string, unknown>, req: IncomingMessage, res: ServerResponse) => Promise<unknown>;

/** The user of a Basic authorization (`user:`), as E2B's SDKs send it, checked as the API checks users. */
export function userOf(req: IncomingMessage): string | undefined {
  const m = /^Basic\s+(\S+)$/i.exec(String(req.headers.authorization ?? ''));
  if (!m) return undefined;
  const name = Buffer.from(m[1]!, 'base64').toString('utf8').split(':')[0] ?? '';
  return name ? userName(name) : undefined;
}

/** A user's home as E2B's sandboxes have it: root's /root, anyone else's /home/{name}. */
export const homeOf = (user: string | null | undefined): string => (!user || user === 'root' || user === '0' ? '/root' : `/home/${user}`);

/** A path as E2B means it: relative ones from the home of the user the call acts as (else the sandbox's own). */
export function absolute(path: unknown, a: Pick<Agent, 'user' | 'defaultUser'>, user = a.user): string {
  if (typeof path !== 'string' || !path) throw new ConnectError('invalid_argument', 'a path is needed');
  if (path.includes('\0') || path.length > 4096) throw new ConnectError('invalid_argument', 'a path is at most 4096 bytes, without NUL');
  if (path.startsWith('/')) return posix.normalize(path);
  return posix.join(homeOf(user ?? a.defaultUser), path);
}

const FILE_TYPES: Record<FileEntry['type'], string> = {
  file: 'FILE_TYPE_FILE',
  dir: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};

/** `ls -l`'s permission string of a mode. */
function permissions(e: FileEntry): string {
  const kind = e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'l' : '-';
  let s = kind;
  for (let shift = 6; shift >= 0; shift -= 3) {
    const bits = (e.mode >> shift) & 7;
    s += (bits & 4 ? 'r' : '-') + (bits & 2 ? 'w' : '-') + (bits & 1 ? 'x' : '-');
  }
  return s;
}

/** The attribute namespace E2B keeps a file's metadata in (`X-Metadata-*` on upload, EntryInfo.metadata). */
export const METADATA_PREFIX = 'user.e2b.';

/** E2B's metadata of a file: its attributes under METADATA_PREFIX, the prefix taken off (none: undefined). */
export function metadataOf(e: FileEntry): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  for (const [k, v] of Object.entries(e.xattrs ?? {})) if (k.startsWith(METADATA_PREFIX)) (out ??= {})[k.slice(METADATA_PREFIX.length)] = v;
  return out;
}

/** E2B's EntryInfo of a Warren file entry (its owner and group named by `owners`). */
export function entryInfo(e: FileEntry, owners?: Owners): Record<string, unknown> {
  const metadata = metadataOf(e);
  return {
    name: e.name,
    type: FILE_TYPES[e.type],
    path: e.path,
    size: String(e.size),
    mode: e.mode,
    permissions: permissions(e),
    owner: owners?.user(e.uid) ?? '',
    group: owners?.group(e.gid) ?? '',
    modifiedTime: e.mtime,
    // As envd's: where the link points, as an absolute path.
    ...(e.target !== undefined ? { symlinkTarget: posix.resolve(posix.dirname(e.path), e.target) } : {}),
    ...(metadata ? { metadata } : {}),
  };
}
