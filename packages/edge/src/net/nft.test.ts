import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseIpv4 } from '@warren/api';
import { buildRuleset, cidrCommands, parseDeniedSet } from './nft.js';

test('the ruleset is one transaction that replaces the table, scoped to this node', () => {
  const r = buildRuleset({
    table: 'warren_ab12',
    ifPrefix: 'wnab12',
    block: { base: parseIpv4('10.200.0.0')!, prefix: 18 },
    ports: { http: 4001, tls: 4002, dns: 4003 },
    maxConnections: 256,
    newConnectionsPerSecond: 500,
    dnsQueriesPerSecond: 50,
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
