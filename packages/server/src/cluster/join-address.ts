import { BlockList, isIP } from 'node:net';
import { lookup as dnsLookup } from 'node:dns/promises';
import { WarrenError } from '@warren/api';

/**
 * The networks edges may join from when the operator names none (`--edge-networks`): loopback
 * and the private ranges (RFC 1918, shared address space, IPv6 unique local). Never link-local
 * (a cloud's metadata service) nor a public address: a join makes the control plane dial the
 * address it names, and that must not be a way to reach anything else.
 */
export const DEFAULT_EDGE_NETWORKS = ['127.0.0.0/8', '10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '::1/128', 'fc00::/7'];

/** The networks a list of CIDRs (`10.0.0.0/16`, `fd00::/8`) names; invalid_argument for one that is not a CIDR. */
export function edgeNetworks(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const c of cidrs) {
    const m = /^([^/]+)\/(\d{1,3})$/.exec(c.trim());
    const family = m ? isIP(m[1]!) : 0;
    const prefix = Number(m?.[2]);
    if (!m || !family || prefix > (family === 4 ? 32 : 128))
      throw new WarrenError('invalid_argument', `the edge networks take CIDRs (10.0.0.0/16, fd00::/8), not "${c}"`);
    list.addSubnet(m[1]!, prefix, family === 4 ? 'ipv4' : 'ipv6');
  }
  return list;
}

/** Resolves a host name to one address (the system's resolver). */
export type Lookup = (host: string) => Promise<{ address: string; family: number }>;

/**
 * Where the control plane dials a joining edge: its `host:port` with the host resolved once (so
 * the address checked is the address dialled, and the one recorded), refused with
 * permission_denied before anything is dialled when it is outside `allowed`. The refusal is the
 * same whatever listens there, or nothing: a join is no way to probe the control plane's network.
 */
export async function joinTarget(address: string, allowed: BlockList, lookup: Lookup = (h) => dnsLookup(h)): Promise<string> {
  const at = address.lastIndexOf(':');
  const host = address.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  const port = Number(address.slice(at + 1));
  const refused = (): WarrenError =>
    new WarrenError('permission_denied', `the join address ${address} is outside the networks edges may join from (--edge-networks)`, { address });
  if (!(port >= 1 && port <= 65535)) throw new WarrenError('invalid_argument', `the join address ${address} has no TCP port`, { address });
  let ip = host;
  if (!isIP(host)) {
    try {
      ip = (await lookup(host)).address;
    } catch {
      // A name that does not resolve says nothing more than one outside the networks.
      throw refused();
    }
  }
  const family = isIP(ip) === 6 ? 'ipv6' : 'ipv4';
  if (!allowed.check(ip, family)) throw refused();
  return family === 'ipv6' ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** The host a database URL names (none for a Unix socket's). */
export function databaseHost(url: string): string {
  try {
    return new URL(url).hostname;
  } catch {
    return '';
  }
}
