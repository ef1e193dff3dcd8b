import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import type { Backend, BackendSandbox } from '../backends/backend.js';
import type { Command } from './command.js';
import { nextRelief } from './housekeeping.js';
import { newLive, type Live } from './live.js';
import { MemoryPressure, READING_FRESH_MS } from './pressure.js';

// A backend that can page out and pause (the container backend's abilities), never called here.
const able = { pageOut: () => Promise.resolve(0), capabilities: { pause: true } } as unknown as Backend;

function box(id: string, lastActivityMs: number, o: { busy?: boolean; paused?: boolean; backend?: Backend; memoryMiB?: number } = {}): Live {
  const l = newLive(
    {
      id,
      layers: [],
      resources: { cpu: 1, memoryMiB: o.memoryMiB ?? 512, pids: 64 },
      env: {},
      user: null,
      workdir: null,
      expiresAtMs: null,
      idleTimeoutMs: null,
      lastActivityMs,
      paused: o.paused ?? false,
    },
    {} as BackendSandbox,
    o.backend ?? able,
  );
  if (o.busy) l.commands.set('c', { done: false } as Command);
  return l;
}

test('relief: idle sandboxes are paged out first, longest idle first; then the longest-idle one paused; never a busy one', () => {
  const live = new Map<string, Live>([
    ['recent', box('recent', 300)],
    ['busy', box('busy', 0, { busy: true })],
    ['oldest', box('oldest', 100)],
    ['paused', box('paused', 50, { paused: true })],
  ]);
  assert.equal(nextRelief(live, 600, 500), null, 'enough available: nothing');
  assert.deepEqual(nextRelief(live, 400, 500), { kind: 'pageOut', id: 'oldest' });
  live.get('oldest')!.pagedOutAtMs = 400;
  assert.deepEqual(nextRelief(live, 400, 500), { kind: 'pageOut', id: 'recent' });
  live.get('recent')!.pagedOutAtMs = 400;
  // Every idle one paged out since its last activity: the longest idle is paused.
  assert.deepEqual(nextRelief(live, 400, 500), { kind: 'pause', id: 'oldest' });
  // Activity since its page-out makes it a candidate for one again.
  live.get('recent')!.spec.lastActivityMs = 450;
  assert.deepEqual(nextRelief(live, 400, 500), { kind: 'pageOut', id: 'recent' });
  // Only a busy one and paused ones left: nothing more can be done.
  live.delete('recent');
  live.get('oldest')!.spec.paused = true;
  assert.equal(nextRelief(live, 0, 500), null);
  // A backend that cannot page out a running sandbox (a VM) goes straight to a pause; one that cannot pause is left alone.
  const vm = { capabilities: { pause: true } } as unknown as Backend;
  const none = { capabilities: { pause: false } } as unknown as Backend;
  assert.deepEqual(nextRelief(new Map([['vm', box('vm', 0, { backend: vm })]]), 0, 1), { kind: 'pause', id: 'vm' });
  assert.equal(nextRelief(new Map([['x', box('x', 0, { backend: none })]]), 0, 1), null);
});

/** A node whose available memory rises by what each page-out and pause frees (the sandbox's `frees`). */
function node(availableMiB: number, frees: Record<string, { pageOut: number; pause: number }>) {
  let now = 1000;
  const live = new Map<string, Live>(Object.keys(frees).map((id, i) => [id, box(id, i)]));
  const log: string[] = [];
  const pressure = new MemoryPressure({
    nodeId: 'n1',
    floorMiB: 100,
    live,
    availableMiB: () => Promise.resolve(availableMiB),
    now: () => now,
    pageOut: (id) => {
      log.push(`pageOut ${id}`);
      availableMiB += frees[id]!.pageOut;
      return Promise.resolve();
    },
    pauseReclaimed: (id) => {
      log.push(`pause ${id}`);
      live.get(id)!.spec.paused = true;
      availableMiB += frees[id]!.pause;
      return Promise.resolve();
    },
  });
  return { pressure, live, log, tick: (ms: number) => (now += ms), take: (mib: number) => (availableMiB -= mib) };
}

test('the sweep relieves pressure down to the floor and stops there; a page-out is stamped with the injected clock', async () => {
  const n = node(40, { a: { pageOut: 30, pause: 5 }, b: { pageOut: 20, pause: 20 }, c: { pageOut: 20, pause: 50 } });
  await n.pressure.run();
  // 40 → 70 → 90 → 110 ≥ 100: page-outs only, longest idle first.
  assert.deepEqual(n.log, ['pageOut a', 'pageOut b', 'pageOut c']);
  assert.equal(n.live.get('a')!.pagedOutAtMs, 1000);
  // Above the floor: nothing.
  await n.pressure.run();
  assert.equal(n.log.length, 3);
  // Memory taken again (the busy ones grew): every idle one is paged out already, so pauses follow.
  n.take(30);
  await n.pressure.run();
  assert.deepEqual(n.log.slice(3), ['pause a', 'pause b']);
});

test('a create makes room for its request, holds it until it starts, and is refused naming memory once nothing can be reclaimed', async () => {
  const n = node(150, { a: { pageOut: 10, pause: 40 } });
  // 150 ≥ 100 + 50: room at once, nothing relieved.
  const first = await n.pressure.hold(50);
  assert.deepEqual(n.log, []);
  // The first create's request is promised until it starts: a second needs room beyond it.
  const second = await n.pressure.hold(40);
  assert.deepEqual(n.log, ['pageOut a', 'pause a']);
  first.release();
  second.release();
  second.release();
  // 200 available, nothing left to page out or pause.
  const e = await n.pressure.hold(150).then(
    () => null,
    (x: unknown) => x,
  );
  assert.ok(e instanceof WarrenError && e.code === 'resource_exhausted', String(e));
  assert.equal(e.details.resource, 'memory');
  assert.match(e.message, /200 MiB are available, it keeps 100 MiB free and this sandbox requests 150 MiB; its idle sandboxes are paged out and paused \(1\)/);
  // Room for a smaller one.
  (await n.pressure.hold(100)).release();
});

test("a burst of creates reads the kernel's count once while a fresh reading has room; each is counted on it, started or not, so the burst never passes the floor", async () => {
  let reads = 0;
  let availableMiB = 1000;
  let elapsed = 0;
  const pressure = new MemoryPressure({
    nodeId: 'n1',
    floorMiB: 100,
    live: new Map(),
    availableMiB: () => (reads++, Promise.resolve(availableMiB)),
    now: () => 0,
    elapsedMs: () => elapsed,
    pageOut: () => Promise.resolve(),
    pauseReclaimed: () => Promise.resolve(),
  });
  // 1000 available: room for 900 above the floor, 4 creates of 200 on the first reading.
  const held = [];
  for (let i = 0; i < 4; i++) held.push(await pressure.hold(200));
  assert.equal(reads, 1);
  // Started (released) creates stay counted on that reading: their memory is in use now.
  for (const h of held) h.release();
  // A fifth does not fit on it (1000 - 800 - 200 < 100): the count is read again, and is what decides.
  availableMiB = 250;
  const e = await pressure.hold(200).then(
    () => null,
    (x: unknown) => x,
  );
  assert.ok(e instanceof WarrenError && e.code === 'resource_exhausted', String(e));
  assert.equal(reads, 2);
  // Room again (the sandboxes went): a new reading, then the burst goes on without reads.
  availableMiB = 1000;
  (await pressure.hold(100)).release();
  (await pressure.hold(100)).release();
  assert.equal(reads, 3);
  // A reading READING_FRESH_MS old stands no more.
  elapsed += READING_FRESH_MS;
  (await pressure.hold(100)).release();
  assert.equal(reads, 4);
});
