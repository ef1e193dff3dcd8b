import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { createSocket } from 'node:dgram';
import { parseIpv4 } from '@warren/api';
import { RCODE, buildAnswer, parseQuery } from './dns.js';

test("Node's own resolver gets A answers, NXDOMAIN and empty AAAA from a server built on these", async () => {
  const sock = createSocket('udp4');
  const seen: string[] = [];
  sock.on('message', (msg, from) => {
    const q = parseQuery(msg);
    if (!q) return;
    seen.push(`${q.name ?? '?'}/${q.type}`);
    const allowed = q.name === 'pypi.example' || q.name === 'files.pyfiles.example';
    const reply = !allowed
      ? buildAnswer(q, RCODE.nxdomain, null)
      : q.type === 1
        ? buildAnswer(q, RCODE.ok, parseIpv4('10.200.0.0'))
        : buildAnswer(q, RCODE.ok, null);
    sock.send(reply, from.port, from.address);
  });
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  try {
    const r = new Resolver({ timeout: 2000, tries: 1 });
    r.setServers([`127.0.0.1:${sock.address().port}`]);
    assert.deepEqual(await r.resolve4('PyPI.example'), ['10.200.0.0']);
    await assert.rejects(r.resolve4('registry.npm.example'), (e: NodeJS.ErrnoException) => e.code === 'ENOTFOUND');
    await assert.rejects(r.resolve6('pypi.example'), (e: NodeJS.ErrnoException) => e.code === 'ENODATA');
    assert.ok(seen.includes('pypi.example/1') && seen.includes('registry.npm.example/1'));
  } finally {
    sock.close();
  }
});

test('malformed queries are dropped, odd names refused', () => {
  assert.equal(parseQuery(Buffer.alloc(5)), null);
  const q = Buffer.from([0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 0x61, 0x20, 0x62, 0, 0, 1, 0, 1]);
  assert.equal(parseQuery(q)?.name, null);
  const ptr = Buffer.from([0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1]);
  assert.equal(parseQuery(ptr), null);
  const response = Buffer.from([0, 1, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]);
  assert.equal(parseQuery(response), null);
});
