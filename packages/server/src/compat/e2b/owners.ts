import type { RouteDeps } from '../../http/route-types.js';
import type { Agent } from './agent.js';

/** Names of a sandbox's users and groups by id, as its /etc/passwd and /etc/group have them. */
export interface Owners {
  user(uid: number | undefined): string;
  group(gid: number | undefined): string;
}

/** Names by id of a passwd or group file (pure): `name:x:id:...` lines; the first of an id wins. */
export function namesById(text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split('\n')) {
    const f = line.split(':');
    const id = Number(f[2]);
    if (f.length >= 3 && f[0] && /^\d+$/.test(f[2] ?? '') && !out.has(id)) out.set(id, f[0]);
  }
  return out;
}

/** How long a sandbox's names are kept before they are read again (a user added meanwhile shows then). */
const KEEP_MS = 30_000;
/** The most files of names read at once: a bigger one is not a passwd file a sandbox needs. */
const MAX_FILE = 1024 * 1024;

const cache = new WeakMap<RouteDeps, Map<string, { at: number; owners: Promise<Owners> }>>();

async function readSmall(d: RouteDeps, a: Agent, path: string): Promise<string> {
  try {
    const chunks: Uint8Array[] = [];
    let size = 0;
    for await (const c of await d.files.read(a.caller, a.id, path)) {
      size += c.length;
      if (size > MAX_FILE) break;
      chunks.push(c);
    }
    return Buffer.concat(chunks).toString('utf8');
  } catch {
    return '';
  }
}

/**
 * A sandbox's owners' names (as envd shows an entry's owner and group), read from its own files
 * and kept a while; an id the files do not name shows as the number.
 */
export function ownersOf(d: RouteDeps, a: Agent): Promise<Owners> {
  let m = cache.get(d);
  if (!m) cache.set(d, (m = new Map<string, { at: number; owners: Promise<Owners> }>()));
  const now = Date.now();
  const hit = m.get(a.id);
  if (hit && now - hit.at < KEEP_MS) return hit.owners;
  if (m.size >= 10_000) m.clear();
  const owners = Promise.all([readSmall(d, a, '/etc/passwd'), readSmall(d, a, '/etc/group')]).then(([p, g]) => {
    const users = namesById(p);
    const groups = namesById(g);
    return {
      user: (uid: number | undefined) => (uid === undefined ? '' : (users.get(uid) ?? String(uid))),
      group: (gid: number | undefined) => (gid === undefined ? '' : (groups.get(gid) ?? String(gid))),
    };
  });
  m.set(a.id, { at: now, owners });
  return owners;
}
