import { WarrenError } from '@warren/sdk';
import { sandbox } from '../client.js';

/** `warren rm | pause | resume ID...`. */
export async function run(rest: string[], cmd: string): Promise<number> {
  if (!rest.length) throw new WarrenError('invalid_argument', 'name a sandbox id');
  for (const id of rest) {
    const sb = await sandbox(id);
    await (cmd === 'rm' ? sb.delete() : cmd === 'pause' ? sb.pause() : sb.resume());
  }
  return 0;
}
