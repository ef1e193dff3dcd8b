import { readFile, writeFile } from 'node:fs/promises';
import { WarrenError } from '@warren/sdk';
import { sandbox } from '../client.js';

/** `warren cp SRC DST`: one side is ID:/path. */
export async function run(rest: string[]): Promise<number> {
  const [src, dst] = rest;
  if (!src || !dst) throw new WarrenError('invalid_argument', 'usage: warren cp SRC DST (one side ID:/path)');
  const remote = (s: string): [string, string] | null => {
    const m = /^(sb_[A-Za-z0-9]+):(\/.*)$/.exec(s);
    return m ? [m[1] as string, m[2] as string] : null;
  };
  const from = remote(src);
  const to = remote(dst);
  if (from && !to) await writeFile(dst, await (await sandbox(from[0])).files.read(from[1]));
  else if (to && !from) await (await sandbox(to[0])).files.write(to[1], await readFile(src));
  else throw new WarrenError('invalid_argument', 'exactly one side of cp is ID:/path');
  return 0;
}
