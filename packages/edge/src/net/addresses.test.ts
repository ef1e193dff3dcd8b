import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatIpv4, parseIpv4 } from '@warren/api';
import { formatCidr, nodeTag, parseProcRoutes, pickBlock, slot, slotCount, slotOfSandbox } from './addresses.js';

const ROUTES = `Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
br0\t0000C80A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
wnabcd0\t0000CA0A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
`;

test('host routes parse; a block avoids foreign routes but not our own', () => {
  const routes = parseProcRoutes(ROUTES);
  assert.deepEqual(
    routes.map((r) => `${r.iface} ${formatIpv4(r.dest)}/${r.prefix}`),
    ['eth0 0.0.0.0/0', 'eth0 10.0.0.0/24', 'br0 10.200.0.0/16', 'wnabcd0 10.202.0.0/16'],
  );
  // Start at the first block: 10.200/16 is taken by br0, so the first free one is 10.201.0.0/17.
  assert.equal(formatCidr(pickBlock(routes, 'wnabcd', '0000')), '10.201.0.0/17');
  // Our own interfaces' routes do not block (a restarted node finds its block free).
  assert.equal(formatCidr(pickBlock(routes, 'wnabcd', (4).toString(36))), '10.202.0.0/17');
  assert.match(nodeTag('/var/lib/warren'), /^[0-9a-z]{4}$/);
});

test('slots: a /31 each, host end even, interface names short enough', () => {
  const block = { base: parseIpv4('10.200.0.0')!, prefix: 18 };
  assert.equal(slotCount(block), 8192);
  const s = slot(block, 'wnabcd', 8191);
  assert.equal(formatIpv4(s.hostIp), '10.200.63.254');
  assert.equal(formatIpv4(s.sandboxIp), '10.200.63.255');
  assert.ok(s.hostIf.length <= 15);
  assert.equal(slotOfSandbox(block, s.sandboxIp), 8191);
  assert.equal(slotOfSandbox(block, s.hostIp), null);
  assert.equal(slotOfSandbox(block, parseIpv4('10.201.0.1')!), null);
  // A node's default block holds 16,384 links, the last one's interface name still short enough.
  const wide = pickBlock([], 'wnabcd', '0000');
  assert.equal(slotCount(wide), 16384);
  assert.ok(slot(wide, 'wnabcd', 16383).hostIf.length <= 15);
});
