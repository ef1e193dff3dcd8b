import { lstat, lchown, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { shiftId, type IdMap } from './idmap.js';

/**
 * Shifts the ownership of every entry under `dir` into the sandbox id range, so a layer built
 * from it reads as owned by root (and its other users) inside a user-namespaced sandbox.
 */
export async function shiftOwnership(dir: string, map: IdMap): Promise<number> {
  let count = 0;
  const walk = async (p: string): Promise<void> => {
    const st = await lstat(p);
    await lchown(p, shiftId(st.uid, map), shiftId(st.gid, map));
    count++;
    if (st.isDirectory()) {
      for (const name of await readdir(p)) await walk(join(p, name));
    }
  };
  await walk(dir);
  return count;
}

/** Lines of /etc/passwd and /etc/group for the users every Warren base image has. */
export const BASE_USERS = {
  passwd: ['root:x:0:0:root:/root:/bin/sh', 'agent:x:1000:1000:agent:/home/agent:/bin/sh', 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin'],
  group: ['root:x:0:', 'agent:x:1000:', 'nogroup:x:65534:'],
};
