import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { EdgeSandboxState } from '@warren/edge';
import type { Cluster } from '../cluster/cluster.js';
import type { SandboxRecord } from '../store/store.js';
import { sqliteStores } from '../testing/store-places.js';
import { SandboxLists } from './sandbox-lists.js';
import type { Caller } from './sandboxes.js';
import { sandboxRecord } from '../testing/sandbox-record.js';

const record = (id: string): SandboxRecord => sandboxRecord(id, 't', { resources: { cpu: 0.1, memoryMiB: 64, pids: 64, diskMiB: null } });

/** One node whose sandboxes are paused when `paused(id)`: answers `sandboxes` and nothing else. */
function oneNode(paused: (id: string) => boolean): Cluster {
  const edge = {
    sandboxes: async (q: { ids?: string[] }): Promise<EdgeSandboxState[]> =>
      (q.ids ?? []).map((id) => ({ id, paused: paused(id), lastActivityMs: 1, expiresAtMs: null, usage: null, network: null })),
  };
  const fake = { edge: (node: string) => (node === 'n1' ? edge : assert.fail(`no node ${node}`)), goneSignal: () => new AbortController().signal };
  return fake as unknown as Cluster;
}

const caller = { tenant: 't' } as Caller;

test('a list filtered by live state reads past rows that do not match, page after page', async () => {
  const place = await sqliteStores.place();
  try {
    const store = await place.open();
    // 10,005 sandboxes (a full node); only the last 3 are paused.
    const ids = Array.from({ length: 10_005 }, (_, i) => `sb_${String(i).padStart(5, '0')}`);
    await store.insertSandboxes(ids.map(record));
    const lists = new SandboxLists(
      store,
      oneNode((id) => id >= 'sb_10002'),
      {},
    );
    const first = await lists.list(caller, { state: 'paused', limit: 2 });
    assert.deepEqual(
      first.sandboxes.map((s) => [s.id, s.state]),
      [
        ['sb_10002', 'paused'],
        ['sb_10003', 'paused'],
      ],
    );
    assert.ok(first.nextCursor, 'a third paused sandbox is left');
    const second = await lists.list(caller, { state: 'paused', limit: 2, cursor: first.nextCursor });
    assert.deepEqual(
      second.sandboxes.map((s) => s.id),
      ['sb_10004'],
    );
    assert.equal(second.nextCursor, null);
    // Unfiltered: pages of the store's rows as before.
    const all = await lists.list(caller, { limit: 10 });
    assert.equal(all.sandboxes.length, 10);
    assert.ok(all.nextCursor);
  } finally {
    await place.remove();
  }
});
