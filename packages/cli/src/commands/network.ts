import { parseArgs } from 'node:util';
import { networkFlags } from '../args.js';
import { sandbox } from '../client.js';

/** `warren network ID`: replaces a running sandbox's rules. */
export async function run(rest: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      egress: { type: 'string' },
      allow: { type: 'string', multiple: true },
      deny: { type: 'string', multiple: true },
      endpoint: { type: 'string', multiple: true },
    },
  });
  const info = await (await sandbox(positionals[0])).setNetwork(networkFlags(values));
  console.log(JSON.stringify(info.network, null, 2));
  return 0;
}
