import { parseArgs } from 'node:util';
import { startEdge, startSimulatedEdge } from '@warren/edge';
import { nodeOptions, upFlags } from '../node-options.js';
import { log, runUntilSignal } from '../up.js';

/** `warren edge --join URL --name NAME`: a node that joins a control plane. */
export async function run(rest: string[]): Promise<number> {
  const { values } = parseArgs({ args: rest, options: upFlags('edge') });
  const o = await nodeOptions(values, process.env, 'edge');
  if (!o.join) throw new Error('warren edge needs --join URL (the control plane)');
  if (!o.joinToken) throw new Error('warren edge needs the cluster’s join token: WARREN_JOIN_TOKEN (or --token)');
  if (!o.nodeId) throw new Error('warren edge needs --name NAME');
  const listen = o.listen ?? { host: '0.0.0.0', port: 7071 };
  const e = o.simulate
    ? await startSimulatedEdge({ join: o.join, token: o.joinToken, nodeId: o.nodeId, listen, capacity: o.simulate, logger: log })
    : await startEdge({ ...o, join: o.join, token: o.joinToken, nodeId: o.nodeId, listen, logger: log });
  console.log(`Warren edge "${e.nodeId}" joined ${o.join}; its edge protocol is at ${e.address}`);
  runUntilSignal(() => e.close({ keep: o.keepSandboxes }), o.dataDir);
  return -1; // keeps running
}
