import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { DEFAULT_EDGE_NETWORKS, databaseHost, edgeNetworks, joinTarget } from './join-address.js';

test('a join address is dialled only inside the edge networks: its name resolved once, the same refusal whatever the address', async () => {
  const allowed = edgeNetworks(DEFAULT_EDGE_NETWORKS);
  const names: Record<string, string> = { 'node-17.example': '10.0.0.17', 'metadata.example': '169.254.169.254' };
  const lookup = async (h: string) => {
    const address = names[h];
    if (!address) throw new Error(`ENOTFOUND ${h}`);
    return { address, family: 4 };
  };
  assert.equal(await joinTarget('127.0.0.1:7071', allowed, lookup), '127.0.0.1:7071');
  assert.equal(await joinTarget('node-17.example:7071', allowed, lookup), '10.0.0.17:7071');
  assert.equal(await joinTarget('[fd00::17]:7071', allowed, lookup), '[fd00::17]:7071');
  const refusal = async (address: string): Promise<string> => {
    const e = (await joinTarget(address, allowed, lookup).then(
      () => assert.fail(`${address} was let through`),
      (x: unknown) => x,
    )) as WarrenError;
    assert.equal(e.code, 'permission_denied');
    return e.message.replace(address, 'ADDRESS');
  };
  // The metadata service, a public address, a name that resolves to link-local or to nothing,
  // an IPv4-mapped IPv6 link-local address: one refusal, nothing dialled.
  const said = await Promise.all(
    ['169.254.169.254:80', '8.8.8.8:53', 'metadata.example:80', 'nowhere.example:7071', '[::ffff:169.254.169.254]:80', '0.0.0.0:7071'].map(refusal),
  );
  assert.deepEqual(new Set(said).size, 1, said.join('\n'));
  // An operator's list: only the nodes' subnet.
  const mine = edgeNetworks(['10.0.0.0/24']);
  assert.equal(await joinTarget('10.0.0.9:7071', mine, lookup), '10.0.0.9:7071');
  await assert.rejects(joinTarget('10.0.1.9:5432', mine, lookup), (e: WarrenError) => e.code === 'permission_denied');
  await assert.rejects(joinTarget('127.0.0.1:7071', mine, lookup), (e: WarrenError) => e.code === 'permission_denied');
  for (const bad of ['10.0.0.0', '10.0.0.0/33', 'example/8', '::/129'])
    assert.throws(
      () => edgeNetworks([bad]),
      (e: WarrenError) => e.code === 'invalid_argument' && e.message.includes(bad),
    );
});

test('a database URL’s host: none for a Unix socket’s', () => {
  assert.equal(databaseHost('postgres://warren:secret@db.example:5432/warren'), 'db.example');
  assert.equal(databaseHost('postgres:///warren?host=/run/postgresql'), '');
});
