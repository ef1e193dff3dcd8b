import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ImageCatalogue, LayerStore } from '@warren/images';
import type { Store } from './store.js';
import { startTestPostgres, type TestPostgres } from '../testing/postgres.js';
import { postgresStores, sqliteStores, type StoreKind } from '../testing/store-places.js';

// The same tests on each kind of store (SQLite, PostgreSQL: its server starts when first needed).
let server: Promise<TestPostgres> | undefined;
after(async () => {
  await (await server?.catch(() => undefined))?.stop();
});
const KINDS: StoreKind[] = [sqliteStores, postgresStores(() => (server ??= startTestPostgres()))];

/**
 * A catalogue over a fresh layer directory and a store on a new place of `kind`; `reopen` is
 * another catalogue on the same (a restart), `store` another store on it; `layer(text)` adds a
 * (fake) layer blob.
 */
async function withCatalogue(
  kind: StoreKind,
  fn: (
    c: ImageCatalogue,
    o: { root: string; reopen: () => Promise<ImageCatalogue>; store: () => Promise<Store>; layer: (text: string) => Promise<string> },
  ) => Promise<void>,
): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'warren-catalogue-'));
  const place = await kind.place();
  const blobs = new LayerStore(join(root, 'layers'));
  const open = async (): Promise<ImageCatalogue> => new ImageCatalogue(blobs, await place.open());
  try {
    await blobs.open();
    const layer = async (text: string): Promise<string> => {
      const meta = join(root, `meta-${text}`);
      await writeFile(meta, text);
      return blobs.addLayerFile(meta, null);
    };
    await fn(await open(), { root, reopen: open, store: () => place.open(), layer });
  } finally {
    await place.remove();
    await rm(root, { recursive: true, force: true });
  }
}

for (const kind of KINDS) {
  test(`${kind.name}: concurrent image and layer names all survive a restart of the store`, async () => {
    await withCatalogue(kind, async (c, { reopen, layer }) => {
      const digest = await layer('one');
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => [
          c.setImage(`img/${i}:v1`, [digest], i % 2 ? 't' : null, { N: String(i) }),
          c.nameLayer(`lay/${i}`, digest),
        ]).flat(),
      );
      const again = await reopen();
      assert.deepEqual((await again.listImages()).map((i) => i.name).sort(), Array.from({ length: 20 }, (_, i) => `img/${i}:v1`).sort());
      assert.equal((await again.getImage('img/7:v1'))?.env.N, '7');
      assert.equal((await again.getImage('img/7:v1'))?.tenant, 't');
      assert.equal((await again.getImage('img/7:v1'))?.sizeBytes, 3);
      assert.deepEqual((await again.listLayers()).map((l) => l.name).sort(), Array.from({ length: 20 }, (_, i) => `lay/${i}`).sort());
    });
  });

  test(`${kind.name}: a digest resolves for a tenant only through an image or a name it may use; a name through its holder's tenant`, async () => {
    await withCatalogue(kind, async (c, { layer }) => {
      const mine = await layer('mine');
      const shared = await layer('shared');
      const loose = await layer('loose');
      await c.setImage('t/img', [shared, mine], 't');
      await c.nameLayer('everyone/x', shared, null);
      await c.nameLayer('t/private', mine, 't');
      assert.equal(await c.resolveLayer(mine, 't'), mine);
      assert.equal(await c.resolveLayer(mine, 'u'), undefined);
      assert.equal(await c.resolveLayer(mine), mine);
      assert.equal(await c.resolveLayer(shared, 'u'), shared);
      assert.equal(await c.resolveLayer(loose), undefined, 'a blob nothing names is no layer');
      assert.equal(await c.resolveLayer('t/private', 'u'), undefined);
      assert.equal(await c.resolveLayer('t/private', 't'), mine);
      assert.equal(await c.resolveLayer('everyone/x', 'u'), shared);
      // Replacing an image replaces what it holds.
      await c.setImage('t/img', [shared], 't');
      await c.deleteLayerName('t/private');
      assert.equal(await c.resolveLayer(mine), undefined);
    });
  });

  test(`${kind.name}: garbage collection keeps what is named, used or pinned, and forgets the tar sources of what it removed`, async () => {
    await withCatalogue(kind, async (c, { root, store: other, layer }) => {
      const named = await layer('named');
      const used = await layer('used');
      const pinned = await layer('pinned');
      const gone = await layer('gone');
      await c.nameLayer('keep/me', named);
      c.pin(pinned);
      const store = await other();
      await store.putLayerSource('sha256:' + 'a'.repeat(64), gone);
      await store.putLayerSource('sha256:' + 'b'.repeat(64), named);
      assert.deepEqual(await c.collectGarbage([used]), [gone]);
      const left = (await readdir(join(root, 'layers', 'blobs'))).sort();
      assert.equal(left.length, 3);
      assert.equal(await store.layerSource('sha256:' + 'a'.repeat(64)), undefined);
      assert.equal(await c.pinKnownLayer('sha256:' + 'b'.repeat(64)), named);
      c.unpin(named);
      c.unpin(pinned);
      assert.deepEqual(await c.collectGarbage([]), [used, pinned].sort());
    });
  });

  test(`${kind.name}: a data dir's JSON index files are taken into the store once`, async () => {
    await withCatalogue(kind, async (c, { root, layer }) => {
      const d = await layer('old');
      const dir = join(root, 'layers');
      await writeFile(
        join(dir, 'images.json'),
        JSON.stringify({
          'old/img:v1': { layers: [d], sizeBytes: 3, createdAt: '2026-01-01T00:00:00.000Z', tenant: 't', env: { A: '1' } },
          'older:v0': { layers: [d], sizeBytes: 3, createdAt: '2025-01-01T00:00:00.000Z' },
        }),
      );
      await writeFile(
        join(dir, 'layers.json'),
        JSON.stringify({ named: { 'old/layer': { digest: d, createdAt: '2026-01-01T00:00:00.000Z' } }, sources: { ['sha256:' + 'c'.repeat(64)]: d } }),
      );
      assert.deepEqual(await c.adoptIndexFiles(), { images: 2, layers: 1 });
      assert.deepEqual(await c.getImage('old/img:v1'), {
        name: 'old/img:v1',
        layers: [d],
        sizeBytes: 3,
        createdAt: '2026-01-01T00:00:00.000Z',
        tenant: 't',
        env: { A: '1' },
        builtIn: false,
      });
      assert.equal((await c.getImage('older:v0'))?.tenant, null);
      assert.equal(await c.layerNameTenant('old/layer'), null);
      assert.equal(await c.pinKnownLayer('sha256:' + 'c'.repeat(64)), d);
      assert.deepEqual((await readdir(dir)).filter((n) => n.endsWith('.json') || n.endsWith('.imported')).sort(), [
        'images.json.imported',
        'layers.json.imported',
      ]);
      assert.deepEqual(await c.adoptIndexFiles(), { images: 0, layers: 0 });
    });
  });
}
