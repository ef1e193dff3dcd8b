import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseNetworkRule } from '@warren/api';
import type { HostHelper } from '../host/hostd.js';
import { SandboxNetwork } from '../net/sandbox-network.js';
import { Endpoints } from '../net/endpoints.js';
import type { Logger } from '../util/logger.js';
import type { EdgeNodeOptions } from './node-options.js';

/** Opens a node's sandbox networking from its options (the block, a /16 to /18, and the denied CIDRs checked here). */
export async function openNetwork(
  host: HostHelper,
  dataDir: string,
  o: Exclude<EdgeNodeOptions['network'], false | undefined>,
  logger: Logger,
): Promise<SandboxNetwork> {
  let block;
  if (o.subnet) {
    const r = parseNetworkRule(o.subnet);
    if (r.kind !== 'cidr' || r.prefix < 16 || r.prefix > 18) throw new Error(`network subnet "${o.subnet}" must be an IPv4 /16, /17 or /18`);
    block = { base: r.base, prefix: r.prefix };
  }
  const deny = (o.deny ?? []).map((c) => {
    const r = parseNetworkRule(c);
    if (r.kind !== 'cidr') throw new Error(`--deny-networks takes IPv4 CIDRs (10.0.0.0/24), not "${c}"`);
    return { base: r.base, prefix: r.prefix };
  });
  const targets = o.endpoints ?? {};
  const endpoints = new Endpoints({
    targets,
    secret: Object.keys(targets).length ? (o.endpointSecret ?? (await endpointSecret(dataDir))) : '',
    requestsPerSecond: o.endpointRequestsPerSecond,
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
    endpoints,
    logger,
  });
  await net.open();
  if (endpoints.names().length) logger.info('endpoints for sandboxes', { endpoints: endpoints.names() });
  return net;
}

/** The node's endpoint secret: made once, kept in the data dir (tokens stay the same over restarts). */
async function endpointSecret(dataDir: string): Promise<string> {
  const file = join(dataDir, 'endpoint-secret');
  const kept = (await readFile(file, 'utf8').catch(() => '')).trim();
  if (/^[0-9a-f]{64}$/.test(kept)) return kept;
  const made = randomBytes(32).toString('hex');
  await writeFile(file, made + '\n', { mode: 0o600 });
  return made;
}
