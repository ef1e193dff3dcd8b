import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { Cluster } from './cluster.js';
import type { Store } from '../store/store.js';

test('no node is marked down within the down delay after the replica starts, nor after it could not reach the store', async () => {
  let t = 0;
  let away = false;
  const marks: number[] = [];
  const store = {
    markNodesDown: async () => {
      if (away) throw new WarrenError('unavailable', 'the database is not answering');
      marks.push(t);
      return [];
    },
    listNodes: async () => {
      if (away) throw new WarrenError('unavailable', 'the database is not answering');
      return [];
    },
  } as unknown as Store;
  const quiet = { info: () => undefined, warn: () => undefined };
  const c = new Cluster({ store, downAfterMs: 1000, onEvent: () => undefined, logger: quiet, now: () => t });
  await c.refresh();
  t = 999;
  await c.refresh();
  assert.deepEqual(marks, [], 'heartbeats sent while no replica ran were not recorded');
  t = 1000;
  await c.refresh();
  assert.deepEqual(marks, [1000]);
  // The store goes away for longer than the down delay, then comes back.
  away = true;
  t = 1200;
  await assert.rejects(c.refresh(), (e: WarrenError) => e.code === 'unavailable');
  t = 5000;
  await assert.rejects(c.refresh(), (e: WarrenError) => e.code === 'unavailable');
  away = false;
  t = 5100;
  await c.refresh();
  t = 6099;
  await c.refresh();
  assert.deepEqual(marks, [1000], 'silence while the store was away is not the nodes’');
  t = 6100;
  await c.refresh();
  assert.deepEqual(marks, [1000, 6100]);
  await c.close();
});
