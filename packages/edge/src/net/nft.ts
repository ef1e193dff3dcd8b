import { formatIpv4 } from '@warren/api';
import { coalesceCidrs, type Cidr } from './policy.js';

export interface RulesetParams {
  /** nftables table name (inet family), one per Warren node on the host. */
  table: string;
  /** Prefix of the host-side veth names of this node's sandboxes. */
  ifPrefix: string;
  /** The sandboxes' address block. */
  block: Cidr;
  ports: { http: number; tls: number; dns: number };
  /** Concurrent connections one sandbox may hold to the proxy. */
  maxConnections: number;
  /** New proxy connections one sandbox may open per second (a burst of twice that first). */
  newConnectionsPerSecond: number;
  /**
   * DNS queries one sandbox may send per second (a burst of twice that first); the rest are
   * dropped in the kernel, so a flood never reaches the node's event loop, which serves the API.
   */
  dnsQueriesPerSecond: number;
  /**
   * Addresses no sandbox reaches whatever its rules: the cluster's own hosts (its replicas, the
   * other nodes, the database) and the operator's `--deny-networks`. Changed later with
   * alwaysDenyCommands.
   */
  alwaysDeny: Cidr[];
}

const cidr = (c: Cidr): string => `${formatIpv4(c.base)}/${c.prefix}`;
/** A set's elements clause (none when empty: nft refuses an empty one), the ranges coalesced (an interval set refuses overlaps). */
const elements = (l: Cidr[]): string => {
  const c = coalesceCidrs(l);
  return c.length ? `elements = { ${c.map(cidr).join(', ')} }; ` : '';
};

/**
 * The node's whole ruleset, replaced in one transaction (the kernel applies an `nft -f` file
 * atomically): sandboxes reach the proxy and the DNS on their gateway, and directly only the
 * addresses a CIDR rule names; never the host, each other, link-local or IPv6. DNS is always
 * the node's, and ports 80 and 443 of the host's own addresses always the proxy, whatever CIDR
 * a rule names.
 *
 * The `always_deny` set is dropped before any CIDR rule is looked at: the cluster's own hosts are
 * out of every sandbox's reach, whatever /16 its key lets it allow.
 *
 * Per-sandbox state lives in sets keyed by the sandbox's address: `cidr_allow`/`cidr_deny`
 * (address . range), `denied` (a counter of refused new connections) and `dns_limited` (a
 * counter of DNS queries dropped past the rate).
 */
export function buildRuleset(p: RulesetParams): string {
  const sb = `iifname "${p.ifPrefix}*"`;
  const proxyPorts = `{ ${p.ports.http}, ${p.ports.tls} }`;
  return `table inet ${p.table}
delete table inet ${p.table}
table inet ${p.table} {
  set cidr_allow { type ipv4_addr . ipv4_addr; flags interval; }
  set cidr_deny { type ipv4_addr . ipv4_addr; flags interval; }
  set denied { type ipv4_addr; flags dynamic; counter; size 65536; }
  set conns { type ipv4_addr; flags dynamic; size 65536; }
  set connrate { type ipv4_addr; flags dynamic,timeout; timeout 10s; size 65536; }
  set dnsrate { type ipv4_addr; flags dynamic,timeout; timeout 10s; size 65536; }
  set dns_limited { type ipv4_addr; flags dynamic; counter; size 65536; }
  set always_deny { type ipv4_addr; flags interval; ${elements(p.alwaysDeny)}}
  chain pre_raw {
    type filter hook prerouting priority raw; policy accept;
    ${sb} meta nfproto != ipv4 drop
    ${sb} ip saddr != ${cidr(p.block)} drop
    ${sb} fib saddr . iif oif missing drop
  }
  chain pre_nat {
    type nat hook prerouting priority dstnat; policy accept;
    ${sb} udp dport 53 redirect to :${p.ports.dns}
    ${sb} fib daddr type local tcp dport 80 redirect to :${p.ports.http}
    ${sb} fib daddr type local tcp dport 443 redirect to :${p.ports.tls}
    ${sb} ip saddr . ip daddr @cidr_deny return
    ${sb} ip saddr . ip daddr @cidr_allow return
    ${sb} tcp dport 80 redirect to :${p.ports.http}
    ${sb} tcp dport 443 redirect to :${p.ports.tls}
  }
  chain input {
    type filter hook input priority filter; policy accept;
    ${sb} jump sandbox_in
    iifname != "lo" tcp dport ${proxyPorts} drop
    iifname != "lo" udp dport ${p.ports.dns} drop
  }
  chain sandbox_in {
    udp dport ${p.ports.dns} add @dnsrate { ip saddr limit rate over ${p.dnsQueriesPerSecond}/second burst ${2 * p.dnsQueriesPerSecond} packets } add @dns_limited { ip saddr } drop
    ct state established,related accept
    tcp dport ${proxyPorts} ct state new add @connrate { ip saddr limit rate over ${p.newConnectionsPerSecond}/second burst ${2 * p.newConnectionsPerSecond} packets } add @denied { ip saddr } reject with tcp reset
    tcp dport ${proxyPorts} ct state new add @conns { ip saddr ct count over ${p.maxConnections} } add @denied { ip saddr } reject with tcp reset
    tcp dport ${proxyPorts} accept
    udp dport ${p.ports.dns} accept
    ct state new add @denied { ip saddr }
    drop
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ${sb} jump sandbox_fwd
    oifname "${p.ifPrefix}*" ct state established,related accept
    oifname "${p.ifPrefix}*" drop
  }
  chain sandbox_fwd {
    oifname "${p.ifPrefix}*" drop
    ip daddr { 169.254.0.0/16, 127.0.0.0/8, 224.0.0.0/4, 255.255.255.255 } add @denied { ip saddr } drop
    ip daddr @always_deny add @denied { ip saddr } drop
    ct state established,related accept
    ip saddr . ip daddr @cidr_deny add @denied { ip saddr } drop
    ip saddr . ip daddr @cidr_allow accept
    ct state new add @denied { ip saddr }
    drop
  }
  chain post_nat {
    type nat hook postrouting priority srcnat; policy accept;
    ${sb} oifname != "${p.ifPrefix}*" masquerade
  }
}
`;
}

/** Commands that replace the always-deny set's addresses (one transaction with `nft -f`: no moment without them). */
export function alwaysDenyCommands(table: string, deny: Cidr[]): string {
  const c = coalesceCidrs(deny);
  return (
    `flush set inet ${table} always_deny
` +
    (c.length
      ? `add element inet ${table} always_deny { ${c.map(cidr).join(', ')} }
`
      : '')
  );
}

/** Commands that set one sandbox's CIDR elements (after removing `old`, what was set before). */
export function cidrCommands(table: string, address: number, old: { allow: Cidr[]; deny: Cidr[] }, now: { allow: Cidr[]; deny: Cidr[] }): string {
  const ip = formatIpv4(address);
  const lines: string[] = [];
  const elems = (l: Cidr[]): string => l.map((c) => `${ip} . ${cidr(c)}`).join(', ');
  if (old.allow.length) lines.push(`delete element inet ${table} cidr_allow { ${elems(old.allow)} }`);
  if (old.deny.length) lines.push(`delete element inet ${table} cidr_deny { ${elems(old.deny)} }`);
  if (now.allow.length) lines.push(`add element inet ${table} cidr_allow { ${elems(now.allow)} }`);
  if (now.deny.length) lines.push(`add element inet ${table} cidr_deny { ${elems(now.deny)} }`);
  return lines.length ? lines.join('\n') + '\n' : '';
}

/** Counts per sandbox address from a counter set (`nft -j list set … denied`, `dns_limited`). */
export function parseDeniedSet(json: string): Map<string, number> {
  const out = new Map<string, number>();
  const doc = JSON.parse(json) as { nftables?: Array<{ set?: { elem?: unknown[] } }> };
  for (const item of doc.nftables ?? []) {
    for (const e of item.set?.elem ?? []) {
      const el = (e as { elem?: { val?: unknown; counter?: { packets?: number } } }).elem;
      if (el && typeof el.val === 'string') out.set(el.val, el.counter?.packets ?? 0);
    }
  }
  return out;
}
