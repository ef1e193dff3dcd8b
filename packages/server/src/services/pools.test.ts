import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Store } from '../store/store.js';
import type { SandboxService } from './sandboxes.js';
import { PoolService } from './pools.js';

/** A store whose listPools is counted and held until let go. */
function heldStore(): { store: Store; reads: () => number; release: () => void } {
  let reads = 0;
  let release!: () => void;
  let gate = new Promise<void>((r) => (release = r));
  const store = {
    listPools: async () => {
      reads++;
      await gate;
      return [];
    },
  } as unknown as Store;
  return {
    store,
    reads: () => reads,
    release: () => {
      release();
      gate = Promise.resolve();
    },
  };
}

test('a burst of claims makes one more pool sync after the one under way, not one each; a claim after that run started gets its own', async () => {
  const s = heldStore();
  const pools = new PoolService(s.store, { up: () => [], loadOf: async () => ({}) as never }, {} as SandboxService, {
    logger: { warn: () => undefined },
  });
  const first = pools.start();
  await new Promise((r) => setImmediate(r));
  assert.equal(s.reads(), 1, 'the start reads the pools');
  // 20 claims while that read is under way: they need a read after theirs, and share it.
  for (let i = 0; i < 20; i++) pools.claimed();
  s.release();
  await first;
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  assert.equal(s.reads(), 2);
  pools.claimed();
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  assert.equal(s.reads(), 3);
  pools.close();
});

test('a claim that joins a queued sync not asked for now still has every node told again', async () => {
  const s = heldStore();
  s.release();
  let told = 0;
  const node = { id: 'n1', boot: 'b1', state: 'ready', api: { poolsSet: async () => void told++ } };
  const pools = new PoolService(s.store, { up: () => [node] as never, loadOf: async () => ({}) as never }, {} as SandboxService, {
    logger: { warn: () => undefined },
    syncEveryMs: 3_600_000,
  });
  await pools.start();
  assert.equal(told, 1);
  // The timer's sync (told the same a moment ago: skipped), and a claim before it started.
  const timer = (pools as unknown as { sync(now?: boolean): Promise<void> }).sync(false);
  pools.claimed();
  await timer;
  assert.equal(s.reads(), 2, 'one run served both');
  assert.equal(told, 2);
  pools.close();
});
