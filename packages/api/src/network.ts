import { z } from 'zod';

/** One entry of a network rule list, parsed. */
export type NetworkRule =
  | { kind: 'domain'; name: string }
  | { kind: 'wildcard'; suffix: string }
  | { kind: 'cidr'; base: number; prefix: number; text: string };

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** An IPv4 address as a 32-bit unsigned number, or null. */
export function parseIpv4(s: string): number | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  let n = 0;
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > 255) return null;
    n = n * 256 + Number(p);
  }
  return n >>> 0;
}

export const formatIpv4 = (n: number): string => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');

/** The netmask of a prefix length, as an unsigned 32-bit number. */
export const prefixMask = (prefix: number): number => (prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0);

/**
 * A rule as written in `allow`/`deny`: a domain (`pypi.example`, exact), `*.` and a domain (every
 * name under it, not the domain itself), or an IPv4 address or CIDR (`10.1.2.0/24`; direct
 * connections). Names are case-insensitive; a trailing dot is allowed. Throws with a message
 * meant for the caller.
 */
export function parseNetworkRule(raw: string): NetworkRule {
  const s = raw.trim().toLowerCase().replace(/\.$/, '');
  if (s.includes(':')) throw new Error(`"${raw}": IPv6 rules are not supported (sandboxes have no IPv6)`);
  const cidr = /^([0-9.]+)(?:\/([0-9]{1,2}))?$/.exec(s);
  if (cidr) {
    const base = parseIpv4(cidr[1]!);
    const prefix = cidr[2] === undefined ? 32 : Number(cidr[2]);
    if (base === null || prefix > 32) throw new Error(`"${raw}" is not an IPv4 address or CIDR`);
    if ((base & ~prefixMask(prefix)) >>> 0 !== 0)
      throw new Error(`"${raw}" has host bits set (did you mean ${formatIpv4((base & prefixMask(prefix)) >>> 0)}/${prefix}?)`);
    return { kind: 'cidr', base, prefix, text: `${formatIpv4(base)}/${prefix}` };
  }
  const wild = s.startsWith('*.');
  const name = wild ? s.slice(2) : s;
  if (name.includes('*')) throw new Error(`"${raw}": a wildcard is only allowed as a leading "*." label`);
  if (name.length > 253) throw new Error(`"${raw}" is longer than 253 characters`);
  const labels = name.split('.');
  if (labels.some((l) => !LABEL.test(l))) throw new Error(`"${raw}" is not a domain name (labels are 1-63 of a-z, 0-9 and inner "-")`);
  if (labels.length < 2)
    throw new Error(
      wild ? `"${raw}" is too wide: a wildcard must sit under a registrable domain` : `"${raw}" names a top-level domain: name a domain under it`,
    );
  if (/^[0-9]+$/.test(labels[labels.length - 1]!)) throw new Error(`"${raw}" is not a domain name`);
  // "*.com" or "*.co.uk" would open a whole public suffix: a wildcard needs a registrable
  // domain under it (two labels, three when the second-level one is short like co/com/org).
  if (wild && labels.length === 2 && labels[0]!.length <= 3 && labels[1]!.length === 2)
    throw new Error(`"${raw}" is too wide: a wildcard must sit under a registrable domain`);
  return wild ? { kind: 'wildcard', suffix: name } : { kind: 'domain', name };
}

const ruleList = z
  .array(z.string().max(256))
  .max(256)
  .superRefine((list, ctx) => {
    for (const [i, raw] of list.entries()) {
      try {
        parseNetworkRule(raw);
      } catch (e) {
        ctx.addIssue({ code: 'custom', path: [i], message: (e as Error).message });
      }
    }
  });

/** The domain under which a sandbox reaches its endpoints: `http://NAME.warren.internal/`. */
export const ENDPOINT_DOMAIN = 'warren.internal';

/** An endpoint's name: one DNS label (lowercase), what the operator named with `--endpoint NAME=URL`. */
export const EndpointName = z
  .string()
  .regex(LABEL, 'an endpoint name is one DNS label: 1-63 of a-z, 0-9 and inner "-"')
  .describe(`an endpoint the operator named (\`--endpoint NAME=URL\`), reached at http://NAME.${ENDPOINT_DOMAIN}/`);

/**
 * A sandbox's network rules. `egress: "deny"` (the default): only what `allow` names leaves,
 * minus what `deny` names; `"allow"`: every domain but what `deny` names. Domains are reached
 * over HTTP (port 80, by Host) and HTTPS (port 443, by TLS SNI) through the node's proxy; an IP
 * address is reached directly, on any port, only when a CIDR in `allow` covers it. `endpoints`
 * names targets the operator set up (`GET /v1/info` lists them): each is reached over plain HTTP
 * at `http://NAME.warren.internal/`, whatever `egress` and `allow` say, with the sandbox's token
 * added by the node (header `X-Warren-Sandbox-Token`).
 */
export const NetworkPolicy = z.strictObject({
  egress: z.enum(['deny', 'allow']).optional(),
  allow: ruleList.optional(),
  deny: ruleList.optional(),
  endpoints: z
    .array(EndpointName)
    .max(32)
    .refine((l) => new Set(l).size === l.length, 'an endpoint is named twice')
    .optional()
    .describe(
      `operator-named endpoints this sandbox may reach at http://NAME.${ENDPOINT_DOMAIN}/ (plain HTTP through the node's proxy, each request with the header X-Warren-Sandbox-Token; nothing else opens); an unknown name is invalid_argument`,
    ),
});
export type NetworkPolicy = z.infer<typeof NetworkPolicy>;

/** What a sandbox's network did: bytes through its interface and the connections it tried. */
export const NetworkUsage = z.object({
  bytesIn: z.number(),
  bytesOut: z.number(),
  connectionsAllowed: z.number(),
  connectionsDenied: z.number(),
  /** Connections (and DNS answers) per name the rules allowed; at most 100 names are kept. */
  allowed: z.record(z.string(), z.number()),
  /** Connections and DNS queries per name (or address) the rules refused; at most 100 kept. */
  denied: z.record(z.string(), z.number()),
});
export type NetworkUsage = z.infer<typeof NetworkUsage>;

export const SandboxNetwork = z.object({
  egress: z.enum(['deny', 'allow']),
  allow: z.array(z.string()),
  deny: z.array(z.string()),
  /** The operator-named endpoints it reaches at http://NAME.warren.internal/. */
  endpoints: z.array(z.string()),
  /** The sandbox's address on its own link (null on a node without sandbox networking). */
  address: z.string().nullable(),
  usage: NetworkUsage,
});
export type SandboxNetwork = z.infer<typeof SandboxNetwork>;
