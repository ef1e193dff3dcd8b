import { createHash } from 'node:crypto';
import { formatIpv4, parseIpv4, prefixMask } from '@warren/api';
import { cidrHas, type Cidr } from './policy.js';

/** Each sandbox has a /31: the host's end (even) and the sandbox's (odd). */
export const SLOT_PREFIX = 31;
/** The block a node takes for its sandboxes: 16,384 /31 links (a node's sandbox cap is below it). */
export const BLOCK_PREFIX = 17;

/** A sandbox link: slot k of the block, its two addresses and the host-side interface name. */
export interface Slot {
  index: number;
  hostIp: number;
  sandboxIp: number;
  hostIf: string;
}

/** A short, stable tag of a node (from its data dir): names its table, interfaces and block. */
export function nodeTag(dataDir: string): string {
  const n = createHash('sha256').update(dataDir).digest().readUInt32BE(0);
  return (n % 36 ** 4).toString(36).padStart(4, '0');
}

export function slot(block: Cidr, ifPrefix: string, index: number): Slot {
  const hostIp = (block.base + 2 * index) >>> 0;
  return { index, hostIp, sandboxIp: (hostIp + 1) >>> 0, hostIf: `${ifPrefix}${index.toString(36)}` };
}

export const slotCount = (block: Cidr): number => 2 ** (32 - block.prefix) / 2;

/** The slot an address belongs to, or null when it is not a sandbox address of the block. */
export function slotOfSandbox(block: Cidr, ip: number): number | null {
  if (!cidrHas(block, ip) || (ip & 1) === 0) return null;
  return (ip - block.base - 1) / 2;
}

/** A route of the host's main table (/proc/net/route). */
export interface HostRoute {
  iface: string;
  dest: number;
  prefix: number;
}

/** Parses /proc/net/route (addresses are little-endian hex). */
export function parseProcRoutes(text: string): HostRoute[] {
  const le = (h: string): number => Buffer.from(h, 'hex').readUInt32LE(0);
  return text
    .split('\n')
    .slice(1)
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f.length >= 8)
    .map((f) => {
      const mask = le(f[7]!);
      return { iface: f[0]!, dest: le(f[1]!), prefix: 32 - countTrailingZeros(mask) };
    });
}

function countTrailingZeros(n: number): number {
  if (n === 0) return 32;
  let c = 0;
  while ((n & 1) === 0) {
    n >>>= 1;
    c++;
  }
  return c;
}

const overlaps = (a: Cidr, b: Cidr): boolean => {
  const p = Math.min(a.prefix, b.prefix);
  return (a.base & prefixMask(p)) >>> 0 === (b.base & prefixMask(p)) >>> 0;
};

/**
 * A /17 for a node's sandboxes in 10.200.0.0/13 that no route of the host (other than this
 * node's own interfaces) overlaps; the node's tag picks where the search starts, so nodes that
 * start together tend to take different blocks.
 */
export function pickBlock(routes: HostRoute[], ifPrefix: string, tag: string): Cidr {
  const start = parseIpv4('10.200.0.0')!;
  const count = 2 ** (BLOCK_PREFIX - 13);
  const first = parseInt(tag, 36) % count;
  const foreign = routes.filter((r) => r.prefix > 0 && !r.iface.startsWith(ifPrefix));
  for (let i = 0; i < count; i++) {
    const block = { base: (start + ((first + i) % count) * 2 ** (32 - BLOCK_PREFIX)) >>> 0, prefix: BLOCK_PREFIX };
    if (!foreign.some((r) => overlaps(block, { base: r.dest, prefix: r.prefix }))) return block;
  }
  throw new Error('no free /17 for sandboxes in 10.200.0.0/13: name one with the node option sandboxSubnet');
}

export const formatCidr = (c: Cidr): string => `${formatIpv4(c.base)}/${c.prefix}`;

/** Private, loopback, link-local, multicast and reserved ranges: not reachable by name unless a CIDR rule names them. */
export const INTERNAL: Cidr[] = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/3',
].map((c) => {
  const [a, p] = c.split('/');
  return { base: parseIpv4(a!)!, prefix: Number(p) };
});
