import { parseArgs } from 'node:util';
import { startServer } from '@warren/server';
import { nodeOptions, upFlags } from '../node-options.js';
import { log, runUntilSignal } from '../up.js';

/** `warren server`: the control plane alone (stateless replicas on one PostgreSQL); edges join it. */
export async function run(rest: string[]): Promise<number> {
  const { values } = parseArgs({ args: rest, options: upFlags('server') });
  const o = await nodeOptions(values, process.env, 'server');
  if (!o.joinToken) throw new Error('warren server needs a join token for its edges: WARREN_JOIN_TOKEN (or --token)');
  const s = await startServer({
    ...o,
    joinToken: o.joinToken,
    blobStore: o.blobStore,
    advertise: o.advertise,
    edgeNetworks: o.edgeNetworks,
    requireEdgeTls: o.requireEdgeTls,
    crashAt: o.crashAt,
    logger: log,
  });
  console.log(`Warren's control plane is running at ${s.url}`);
  console.log(s.adminKeyFile ? `Admin API key: in ${s.adminKeyFile}` : 'Admin API key: from WARREN_API_KEY');
  console.log(`Nodes join with: warren edge --join ${s.url} --name NAME (WARREN_JOIN_TOKEN set)`);
  runUntilSignal(() => s.close());
  return -1; // keeps running
}
