import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Image } from '@warren/api';
import type { CatalogueStore } from '@warren/images';
import { cachedImages } from './cached-images.js';

const image = (name: string, layer: string): Image =>
  ({ name, layers: [layer], env: {}, tenant: null, sizeBytes: 1, createdAt: '2026-12-02T00:00:00Z' }) as Image;

test("an image's row is read once a second per process; this process's writes are seen at once; a missing image is not kept", async () => {
  const rows = new Map<string, Image>();
  let reads = 0;
  const store = {
    getImage: async (name: string) => {
      reads++;
      await new Promise((r) => setImmediate(r));
      const i = rows.get(name);
      return i && structuredClone(i);
    },
    putImage: async (i: Image) => void rows.set(i.name, i),
    deleteImage: async (name: string) => rows.delete(name),
  } as unknown as CatalogueStore;
  let now = 0;
  const c = cachedImages(store, { ttlMs: 1000, now: () => now });
  assert.equal(await c.getImage('app:1'), undefined);
  rows.set('app:1', image('app:1', 'sha256:a'));
  // Not found before: found now (a miss is not kept). Lookups at once share one read.
  const got = await Promise.all([1, 2, 3].map(() => c.getImage('app:1')));
  assert.deepEqual(
    got.map((i) => i?.layers[0]),
    ['sha256:a', 'sha256:a', 'sha256:a'],
  );
  assert.equal(reads, 2);
  got[0]!.layers.push('changed by a caller');
  got[1]!.env.X = 'changed by a caller';
  assert.deepEqual((await c.getImage('app:1'))?.layers, ['sha256:a'], 'a caller cannot change what is kept');
  assert.deepEqual((await c.getImage('app:1'))?.env, {});
  assert.equal(reads, 2);
  // Replaced by another replica: seen once the second is up.
  rows.set('app:1', image('app:1', 'sha256:b'));
  now = 999;
  assert.equal((await c.getImage('app:1'))?.layers[0], 'sha256:a');
  now = 1000;
  assert.equal((await c.getImage('app:1'))?.layers[0], 'sha256:b');
  // Replaced or deleted through this process: seen at once.
  await c.putImage(image('app:1', 'sha256:c'));
  assert.equal((await c.getImage('app:1'))?.layers[0], 'sha256:c');
  assert.equal(await c.deleteImage('app:1'), true);
  assert.equal(await c.getImage('app:1'), undefined);
});
