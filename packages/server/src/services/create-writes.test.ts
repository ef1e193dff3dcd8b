import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { SandboxRecord, Store } from '../store/store.js';
import { createWrites } from './create-writes.js';

test('with a store that writes inline, the creates of one turn of the event loop are recorded in one write, and marked running in one', async () => {
  const inserts: string[][] = [];
  const marks: string[][] = [];
  const store = {
    writesInline: true,
    insertSandboxes: async (recs: SandboxRecord[]) => void inserts.push(recs.map((r) => r.id)),
    markStarted: async (ids: string[]) => {
      marks.push(ids);
      return ids.filter((id) => id !== 'sb_2');
    },
  } as unknown as Store;
  const w = createWrites(store);
  const ids = ['sb_1', 'sb_2', 'sb_3'];
  await Promise.all(ids.map((id) => w.insert({ id } as SandboxRecord)));
  assert.deepEqual(inserts, [ids]);
  assert.deepEqual(await Promise.all(ids.map((id) => w.start(id))), [true, false, true]);
  assert.deepEqual(marks, [ids]);
});
