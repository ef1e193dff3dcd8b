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

/** One node whose `held`th telling of its pools waits until `answer()`; `told()` counts the tellings. */
function heldNode(held: number): { node: unknown; told: () => number; answer: () => void } {
  let told = 0;
  let answer!: () => void;
  const gate = new Promise<void>((r) => (answer = r));
  const node = { id: 'n1', boot: 'b1', state: 'ready', api: { poolsSet: async () => void (++told === held && (await gate)) } };
  return { node, told: () => told, answer };
}

/** A service over one node, its timer far off (the tests call sync themselves). */
function poolService(store: Store, node: unknown): PoolService {
  return new PoolService(store, { up: () => [node] as never, loadOf: async () => ({}) as never }, {} as SandboxService, {
    logger: { warn: () => undefined },
    syncEveryMs: 3_600_000,
  });
}

/** Turns of the event loop until `done` (at most 1,000). */
async function turnsUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !done(); i++) await new Promise((r) => setImmediate(r));
}

test('a burst of claims makes one more pool sync after the one under way, not one each; a claim after that run started gets its own; a claim reads no pools from the store', async () => {
  const s = heldStore();
  s.release();
  // The node's first answer is held: the start's sync stays under way until it is let go.
  const n = heldNode(1);
  const pools = poolService(s.store, n.node);
  const first = pools.start();
  await turnsUntil(() => n.told() > 0);
  assert.equal(s.reads(), 1, 'the start reads the pools');
  // 20 claims while that sync is under way: they need a run after theirs, and share it.
  const claims = Array.from({ length: 20 }, () => (pools as unknown as { sync(now?: boolean, reread?: boolean): Promise<void> }).sync(true, false));
  n.answer();
  await first;
  await Promise.all(claims);
  assert.equal(n.told(), 2);
  pools.claimed();
  await turnsUntil(() => n.told() === 3);
  assert.equal(n.told(), 3);
  assert.equal(s.reads(), 1, 'claims change no pool: the store is not read for them');
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

test("the timer's read of the pools is not lost behind a claim's run, which reads none", async () => {
  const s = heldStore();
  s.release();
  // The second telling (the claim's run) is held until let go.
  const n = heldNode(2);
  const pools = poolService(s.store, n.node);
  await pools.start();
  assert.equal(s.reads(), 1);
  pools.claimed();
  await turnsUntil(() => n.told() === 2);
  assert.equal(n.told(), 2, "the claim's run is under way");
  const timer = (pools as unknown as { sync(): Promise<void> }).sync();
  n.answer();
  await timer;
  assert.equal(s.reads(), 2, "the timer's sync read the pools");
  pools.close();
});
