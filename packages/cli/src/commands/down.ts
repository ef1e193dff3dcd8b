import { parseArgs } from 'node:util';
import { DEFAULT_DATA_DIR } from '../client.js';
import { down } from '../up.js';

/** `warren down`: stops the node running on a data dir. */
export async function run(rest: string[]): Promise<number> {
  const { values } = parseArgs({ args: rest, options: { 'data-dir': { type: 'string', default: DEFAULT_DATA_DIR } } });
  console.log((await down(values['data-dir'])) ? 'stopped' : 'not running');
  return 0;
}
