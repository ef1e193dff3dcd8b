import { join } from 'node:path';
import { parseNetworkRule } from '@warren/api';
import type { HostHelper } from '../host/hostd.js';
import { SandboxNetwork } from '../net/sandbox-network.js';
import type { Logger } from '../util/logger.js';
import type { EdgeNodeOptions } from './node-options.js';

/** Opens a node's sandbox networking from its options (the /18 and the denied CIDRs checked here). */
export async function openNetwork(
  host: HostHelper,
  dataDir: string,
  o: Exclude<EdgeNodeOptions['network'], false | undefined>,
  logger: Logger,
): Promise<SandboxNetwork> {
  let block;
  if (o.subnet) {
    const r = parseNetworkRule(o.subnet);
    if (r.kind !== 'cidr' || r.prefix !== 18) throw new Error(`network subnet "${o.subnet}" must be an IPv4 /18`);
    block = { base: r.base, prefix: r.prefix };
  }
  const deny = (o.deny ?? []).map((c) => {
    const r = parseNetworkRule(c);
    if (r.kind !== 'cidr') throw new Error(`--deny-networks takes IPv4 CIDRs (10.0.0.0/24), not "${c}"`);
    return { base: r.base, prefix: r.prefix };
  });
  const net = new SandboxNetwork({
    host,
    dataDir,
    runDir: join(dataDir, 'run'),
    block,
    hosts: o.hosts,
    poolSize: o.poolSize,
    maxConnectionsPerSandbox: o.maxConnectionsPerSandbox,
    newConnectionsPerSecond: o.newConnectionsPerSecond,
    dnsQueriesPerSecond: o.dnsQueriesPerSecond,
    deny,
    logger,
  });
  await net.open();
  return net;
}
