import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { Auth, hashKey } from './auth.js';
import type { KeyRecord, Store } from '../store/store.js';

/** The part of a store Auth reads: keys by hash, the lookups counted. */
function keyStore(keys: Map<string, KeyRecord>): { store: Store; lookups: () => number } {
  let n = 0;
  const store = {
    getKey: async (hash: string) => {
      n++;
      await new Promise((r) => setImmediate(r));
      return keys.get(hash);
    },
  } as unknown as Store;
  return { store, lookups: () => n };
}

test('a key is looked up once a second per process; one revoked elsewhere stops working when it is looked up again', async () => {
  const keys = new Map<string, KeyRecord>();
  const record = (key: string): KeyRecord => ({ hash: hashKey(key), tenant: 'acme', role: 'user', quota: {}, createdAt: 0 });
  keys.set(hashKey('wk_one'), record('wk_one'));
  const { store, lookups } = keyStore(keys);
  let now = 1_000_000;
  const auth = new Auth(store, 'admin-key', 'join-token-0123456789', { now: () => now, cacheMs: 1000 });
  // Calls at once share one lookup.
  const callers = await Promise.all([1, 2, 3].map(() => auth.authenticate('Bearer wk_one')));
  assert.deepEqual(
    callers.map((c) => c.tenant),
    ['acme', 'acme', 'acme'],
  );
  assert.equal(lookups(), 1);
  now += 999;
  await auth.authenticate('Bearer wk_one');
  assert.equal(lookups(), 1, 'within a second: from memory');
  // Revoked through another replica (gone from the shared store): refused once looked up again.
  keys.delete(hashKey('wk_one'));
  now += 1;
  await assert.rejects(auth.authenticate('Bearer wk_one'), (e: WarrenError) => e.code === 'unauthenticated');
  assert.equal(lookups(), 2);
  await assert.rejects(auth.authenticate('Bearer wk_one'), (e: WarrenError) => e.code === 'unauthenticated');
  // The bootstrap admin key and the join token are not in the store: never looked up.
  const before = lookups();
  now += 10_000_000;
  assert.equal((await auth.authenticate('Bearer admin-key')).role, 'admin');
  assert.equal((await auth.authenticate('Bearer join-token-0123456789', { node: true })).node, true);
  assert.equal(lookups(), before);
  // The join token is an edge's: refused wherever a caller does not say it serves edges.
  await assert.rejects(auth.authenticate('Bearer join-token-0123456789'), (e: WarrenError) => e.code === 'permission_denied');
  await assert.rejects(auth.authenticate(undefined), (e: WarrenError) => e.code === 'unauthenticated');
});
