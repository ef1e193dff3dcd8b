import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseIpv4 } from '@warren/api';
import { alwaysDenyCommands, buildRuleset, cidrCommands, parseDeniedSet } from './nft.js';

test('the ruleset is one transaction that replaces the table, scoped to this node', () => {
  const r = buildRuleset({
    table: 'warren_ab12',
    ifPrefix: 'wnab12',
    block: { base: parseIpv4('10.200.0.0')!, prefix: 18 },
    ports: { http: 4001, tls: 4002, dns: 4003 },
    maxConnections: 256,
    newConnectionsPerSecond: 500,
    dnsQueriesPerSecond: 50,
    alwaysDeny: [],
  });
  assert.match(r, /^table inet warren_ab12\ndelete table inet warren_ab12\n/);
  assert.match(r, /iifname "wnab12\*" tcp dport 443 redirect to :4002/);
  assert.match(r, /iifname "wnab12\*" ip saddr != 10\.200\.0\.0\/18 drop/);
  assert.match(r, /ct count over 256/);
  assert.match(r, /tcp dport \{ 4001, 4002 \} ct state new add @connrate \{ ip saddr limit rate over 500\/second burst 1000 packets \}/);
  // DNS past its rate is dropped first, every packet (a flood from one socket is one
  // established flow), in the kernel: the proxy never sees it.
  const dns = r.indexOf('udp dport 4003 add @dnsrate { ip saddr limit rate over 50/second burst 100 packets } add @dns_limited { ip saddr } drop');
  assert.ok(dns > 0 && dns < r.indexOf('ct state established,related accept', r.indexOf('chain sandbox_in')));
  assert.doesNotMatch(r, /iifname "wn\*"/);
});

test('CIDR elements: old ones out, new ones in, keyed by the sandbox address', () => {
  const ip = parseIpv4('10.200.0.3')!;
  const a = { base: parseIpv4('10.1.0.0')!, prefix: 16 };
  const d = { base: parseIpv4('10.1.2.0')!, prefix: 24 };
  assert.equal(cidrCommands('t', ip, { allow: [], deny: [] }, { allow: [], deny: [] }), '');
  assert.equal(
    cidrCommands('t', ip, { allow: [a], deny: [] }, { allow: [a], deny: [d] }),
    'delete element inet t cidr_allow { 10.200.0.3 . 10.1.0.0/16 }\nadd element inet t cidr_allow { 10.200.0.3 . 10.1.0.0/16 }\nadd element inet t cidr_deny { 10.200.0.3 . 10.1.2.0/24 }\n',
  );
});

test('denied counters from nft JSON', () => {
  const json =
    '{"nftables":[{"metainfo":{}},{"set":{"name":"denied","elem":[{"elem":{"val":"10.200.0.1","counter":{"packets":7,"bytes":420}}},{"elem":{"val":"10.200.0.3","counter":{"packets":1,"bytes":60}}}]}}]}';
  assert.deepEqual(
    [...parseDeniedSet(json)],
    [
      ['10.200.0.1', 7],
      ['10.200.0.3', 1],
    ],
  );
});

test('the cluster’s own hosts are always denied: dropped before any CIDR rule, existing flows too; the set is replaced in one transaction', () => {
  const c = (s: string): { base: number; prefix: number } => {
    const [a, p] = s.split('/');
    return { base: parseIpv4(a!)!, prefix: Number(p) };
  };
  const params = {
    table: 't',
    ifPrefix: 'wnab12',
    block: c('10.200.0.0/18'),
    ports: { http: 4001, tls: 4002, dns: 4003 },
    maxConnections: 256,
    newConnectionsPerSecond: 500,
    dnsQueriesPerSecond: 50,
  };
  const r = buildRuleset({ ...params, alwaysDeny: [c('10.0.0.5/32'), c('10.0.0.0/24'), c('192.168.7.9/32')] });
  // Nested ranges coalesced (an interval set refuses overlapping elements).
  assert.match(r, /set always_deny \{ type ipv4_addr; flags interval; elements = \{ 10\.0\.0\.0\/24, 192\.168\.7\.9\/32 \}; \}/);
  const fwd = r.slice(r.indexOf('chain sandbox_fwd'));
  const deny = fwd.indexOf('ip daddr @always_deny add @denied { ip saddr } drop');
  assert.ok(deny > 0, fwd);
  assert.ok(deny < fwd.indexOf('ct state established,related accept'), 'before established flows are let through');
  assert.ok(deny < fwd.indexOf('@cidr_allow accept'), 'before any CIDR rule');
  // Empty: a set with no elements clause (nft refuses an empty one).
  assert.match(buildRuleset({ ...params, alwaysDeny: [] }), /set always_deny \{ type ipv4_addr; flags interval; \}/);
  assert.equal(alwaysDenyCommands('t', []), 'flush set inet t always_deny\n');
  assert.equal(alwaysDenyCommands('t', [c('10.0.0.7/32'), c('10.0.0.7/32')]), 'flush set inet t always_deny\nadd element inet t always_deny { 10.0.0.7/32 }\n');
});
