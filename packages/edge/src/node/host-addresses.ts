import { isIP } from 'node:net';
import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';

/**
 * The addresses of hosts named by address or by name (`10.0.0.5`, `db.example`, `[fd00::5]`):
 * each name resolved to all its addresses, unspecified ones and names that do not resolve left
 * out, each address once. What a node is told to keep its sandboxes from (the cluster's hosts).
 */
export async function hostAddresses(
  hosts: readonly string[],
  lookupAll: (host: string) => Promise<LookupAddress[]> = (h) => dnsLookup(h, { all: true }),
): Promise<string[]> {
  const out = new Set<string>();
  await Promise.all(
    hosts.map(async (raw) => {
      const host = raw.replace(/^\[(.*)\]$/, '$1');
      if (!host) return;
      const found = isIP(host) ? [host] : (await lookupAll(host).catch(() => [])).map((a) => a.address);
      for (const a of found) if (a !== '0.0.0.0' && a !== '::') out.add(a);
    }),
  );
  return [...out].sort();
}
