import { ENDPOINT_DOMAIN, parseNetworkRule, prefixMask, type NetworkPolicy } from '@warren/api';

/** An IPv4 range: base address and prefix length. */
export interface Cidr {
  base: number;
  prefix: number;
}

/** A sandbox's rules, parsed once for the proxy, the DNS answers and the kernel's sets. */
export interface CompiledPolicy {
  egress: 'deny' | 'allow';
  allowNames: Set<string>;
  allowSuffixes: string[];
  denyNames: Set<string>;
  denySuffixes: string[];
  allowCidrs: Cidr[];
  denyCidrs: Cidr[];
  /** The operator's endpoints it reaches at http://NAME.warren.internal/ (whatever the rest says). */
  endpoints: Set<string>;
  /** The policy as given, normalised (what the sandbox object shows). */
  source: { egress: 'deny' | 'allow'; allow: string[]; deny: string[]; endpoints: string[] };
}

/** Whether a policy lets a sandbox reach anything beyond its own loopback. */
export function opensNetwork(c: CompiledPolicy): boolean {
  return c.egress === 'allow' || c.allowNames.size > 0 || c.allowSuffixes.length > 0 || c.allowCidrs.length > 0 || c.endpoints.size > 0;
}

/** Parses a policy; throws (with the offending rule) on what the schema would have refused. */
export function compilePolicy(p: NetworkPolicy | undefined): CompiledPolicy {
  const c: CompiledPolicy = {
    egress: p?.egress ?? 'deny',
    allowNames: new Set(),
    allowSuffixes: [],
    denyNames: new Set(),
    denySuffixes: [],
    allowCidrs: [],
    denyCidrs: [],
    endpoints: new Set(p?.endpoints ?? []),
    source: { egress: p?.egress ?? 'deny', allow: [], deny: [], endpoints: [...new Set(p?.endpoints ?? [])] },
  };
  for (const [list, names, suffixes, cidrs, out] of [
    [p?.allow ?? [], c.allowNames, c.allowSuffixes, c.allowCidrs, c.source.allow],
    [p?.deny ?? [], c.denyNames, c.denySuffixes, c.denyCidrs, c.source.deny],
  ] as const) {
    for (const raw of list) {
      const r = parseNetworkRule(raw);
      if (r.kind === 'domain') {
        names.add(r.name);
        out.push(r.name);
      } else if (r.kind === 'wildcard') {
        suffixes.push(r.suffix);
        out.push(`*.${r.suffix}`);
      } else {
        cidrs.push({ base: r.base, prefix: r.prefix });
        out.push(r.text);
      }
    }
  }
  c.allowCidrs = coalesceCidrs(c.allowCidrs);
  c.denyCidrs = coalesceCidrs(c.denyCidrs);
  return c;
}

/**
 * The same ranges without duplicates or ranges inside others (two CIDRs are nested or
 * disjoint): the kernel's interval sets refuse overlapping elements.
 */
export function coalesceCidrs(list: Cidr[]): Cidr[] {
  const out: Cidr[] = [];
  for (const c of [...list].sort((a, b) => a.prefix - b.prefix || a.base - b.base)) if (!out.some((o) => cidrHas(o, c.base))) out.push(c);
  return out;
}

const underAny = (name: string, suffixes: string[]): boolean => suffixes.some((s) => name.endsWith(`.${s}`));

/**
 * Whether a name (lowercase, no trailing dot) may be reached: deny rules win, then `allow` rules
 * (egress deny) or everything (egress allow). Names under warren.internal never (endpoints are
 * reached by their own path).
 */
export function nameAllowed(c: CompiledPolicy, name: string): boolean {
  if (name === ENDPOINT_DOMAIN || name.endsWith(`.${ENDPOINT_DOMAIN}`)) return false;
  if (c.denyNames.has(name) || underAny(name, c.denySuffixes)) return false;
  if (c.egress === 'allow') return true;
  return c.allowNames.has(name) || underAny(name, c.allowSuffixes);
}

export const cidrHas = (c: Cidr, ip: number): boolean => (ip & prefixMask(c.prefix)) >>> 0 === c.base;

/** Whether a direct connection to an address is allowed: a CIDR in allow covers it, none in deny. */
export function addressAllowed(c: CompiledPolicy, ip: number): boolean {
  return !c.denyCidrs.some((d) => cidrHas(d, ip)) && c.allowCidrs.some((a) => cidrHas(a, ip));
}

/** The widest allow CIDR (smallest prefix length), or null: what tenant permissions are checked against. */
export function widestAllowPrefix(c: CompiledPolicy): number | null {
  return c.allowCidrs.reduce<number | null>((m, a) => (m === null || a.prefix < m ? a.prefix : m), null);
}

/**
 * Normalises a Host header or SNI value to a name the rules can match: lowercase, no port, no
 * trailing dot. Null for what is not a DNS name (IP literals, empty, junk).
 */
export function normalizeHostName(raw: string): string | null {
  let h = raw.trim().toLowerCase();
  if (h.startsWith('[')) return null;
  const colon = h.lastIndexOf(':');
  if (colon >= 0) {
    if (!/^[0-9]{1,5}$/.test(h.slice(colon + 1))) return null;
    h = h.slice(0, colon);
  }
  h = h.replace(/\.$/, '');
  if (h.length === 0 || h.length > 253) return null;
  if (!/^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(h)) return null;
  // Digits only in the last label: an address, not a name.
  if (/(^|\.)[0-9]+$/.test(h)) return null;
  return h;
}
