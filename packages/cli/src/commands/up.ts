import { parseArgs } from 'node:util';
import { nodeOptions, upFlags } from '../node-options.js';
import { up } from '../up.js';

/** `warren up`: runs a node (the server loads only here); its flags and what they set are NODE_OPTIONS. */
export async function run(rest: string[]): Promise<number> {
  const { values } = parseArgs({ args: rest, options: upFlags() });
  await up(await nodeOptions(values, process.env));
  return -1; // keeps running
}
