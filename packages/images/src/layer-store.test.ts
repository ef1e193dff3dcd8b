import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IndexWriter, LayerStore } from './layer-store.js';

test('concurrent image and layer names all survive a restart (index saves never rename an older snapshot last)', async () => {
  const root = await mkdtemp(join(tmpdir(), 'warren-unit-store-'));
  try {
    const store = new LayerStore(root);
    await store.open();
    const meta = join(root, 'meta');
    await writeFile(meta, 'not really erofs');
    const digest = await store.addLayerFile(meta, null);
    // Twenty commits and twenty uploads at once, each one save of its index.
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => [
        store.setImage(`img/${i}:v1`, [digest], i % 2 ? 't' : null, { N: String(i) }),
        store.nameLayer(`lay/${i}`, digest),
      ]).flat(),
    );
    const again = new LayerStore(root);
    await again.open();
    assert.deepEqual(
      again
        .listImages()
        .map((i) => i.name)
        .sort(),
      Array.from({ length: 20 }, (_, i) => `img/${i}:v1`).sort(),
    );
    assert.equal(again.getImage('img/7:v1')?.env.N, '7');
    assert.equal(again.getImage('img/7:v1')?.tenant, 't');
    assert.deepEqual((await again.listLayers()).map((l) => l.name).sort(), Array.from({ length: 20 }, (_, i) => `lay/${i}`).sort());
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test('an index writer writes one at a time, and a save asked for during a write writes the state as it is then', async () => {
  const root = await mkdtemp(join(tmpdir(), 'warren-unit-index-'));
  try {
    let state = 0;
    const snapshots: number[] = [];
    const w = new IndexWriter(
      () => join(root, 'index.json'),
      () => {
        snapshots.push(state);
        return JSON.stringify(state);
      },
    );
    state = 1;
    const first = w.save();
    state = 2;
    const second = w.save();
    state = 3;
    const third = w.save();
    assert.equal(second, third, 'saves asked for during one write share the next');
    await Promise.all([first, second, third]);
    assert.deepEqual(snapshots, [1, 3]);
    state = 4;
    await w.save();
    assert.deepEqual(snapshots, [1, 3, 4]);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
