import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { notRunningHere, type EdgeApi } from '@warren/edge';
import type { SandboxRecord } from '../store/store.js';
import { sandboxRecord } from '../testing/sandbox-record.js';
import { LiveRoutes, type RouteNodes } from './live-routes.js';
import type { Caller } from './sandboxes.js';

const acme = { tenant: 'acme', role: 'user' } as Caller;
const other = { tenant: 'other', role: 'user' } as Caller;
const admin = { tenant: 'ops', role: 'admin' } as Caller;

/**
 * Records in a map (the store's word, its reads counted), nodes whose edges run a sandbox while
 * `running` has it (`settled`: the nodes ready or draining; `lose`: a node goes down or starts
 * anew), a clock the test moves.
 */
function world(o: { max?: number } = {}) {
  const recs = new Map<string, SandboxRecord>();
  const running = new Set<string>();
  const settled = new Set(['n1']);
  const gone = new Map<string, AbortController>();
  let losses = 0;
  let reads = 0;
  let clock = 0;
  let hold: Promise<void> | null = null;
  const edgeOf = (node: string): EdgeApi =>
    ({
      // The call the tests make: answers which node ran it, or the edge's refusal.
      run: async (sid: string) => {
        if (!running.has(sid)) throw notRunningHere(sid);
        return node;
      },
    }) as unknown as EdgeApi;
  const nodes: RouteNodes = {
    settled: (node) => (settled.has(node) ? edgeOf(node) : undefined),
    edge: edgeOf,
    goneSignal: (node) => {
      let c = gone.get(node);
      if (!c) gone.set(node, (c = new AbortController()));
      return c.signal;
    },
    get losses() {
      return losses;
    },
  };
  const routes = new LiveRoutes({
    record: async (caller, id) => {
      reads++;
      if (hold) await hold;
      const rec = recs.get(id);
      if (!rec || (rec.tenant !== caller.tenant && caller.role !== 'admin')) throw new WarrenError('not_found', `sandbox ${id} does not exist`);
      return rec;
    },
    nodes,
    now: () => clock,
    max: o.max,
  });
  const add = (id: string, node = 'n1'): void => {
    recs.set(id, sandboxRecord(id, 'acme', { node, user: 'agent' }));
    running.add(id);
  };
  const end = (id: string): void => {
    recs.set(id, { ...recs.get(id)!, state: 'stopped' });
    running.delete(id);
  };
  const lose = (node: string): void => {
    losses++;
    gone.get(node)?.abort();
    gone.delete(node);
  };
  const run = (id: string, caller: Caller = acme): Promise<string> =>
    routes.on(caller, id, (sid, edge) => (edge as unknown as { run(sid: string): Promise<string> }).run(sid));
  return {
    routes,
    add,
    end,
    lose,
    run,
    running,
    settled,
    reads: () => reads,
    advance: (ms: number) => void (clock += ms),
    hold: (p: Promise<void> | null) => void (hold = p),
  };
}

test('a live sandbox is read from the store once: the calls after go straight to its node', async () => {
  const w = world();
  w.add('sb_1');
  assert.equal(await w.run('sb_1'), 'n1');
  assert.equal(await w.run('sb_1'), 'n1');
  await w.routes.check(acme, 'sb_1');
  assert.equal(w.reads(), 1);
  // Past the route's age, the store is asked again.
  w.advance(30_001);
  assert.equal(await w.run('sb_1'), 'n1');
  assert.equal(w.reads(), 2);
});

test('another tenant does not use a route: the store answers not_found, as for an id nobody has', async () => {
  const w = world();
  w.add('sb_1');
  await w.run('sb_1');
  await assert.rejects(w.run('sb_1', other), (e: WarrenError) => e.code === 'not_found');
  await assert.rejects(w.routes.check(other, 'sb_1'), (e: WarrenError) => e.code === 'not_found');
  assert.equal(w.reads(), 3);
});

test('a sandbox ended elsewhere: its node refuses it, and the call fails as the store says; the route is forgotten', async () => {
  const w = world();
  w.add('sb_1');
  await w.run('sb_1');
  w.end('sb_1');
  await assert.rejects(w.run('sb_1'), (e: WarrenError) => e.code === 'conflict' && e.message === 'sandbox sb_1 is stopped');
  assert.equal(w.reads(), 2);
  await assert.rejects(w.routes.check(acme, 'sb_1'), (e: WarrenError) => e.message === 'sandbox sb_1 is stopped');
  assert.equal(w.reads(), 3);
  assert.equal(w.routes.size, 0);
});

test('a refusal while the store says live is the edge’s answer (a node not reconciled yet); the call is not made twice', async () => {
  const w = world();
  w.add('sb_1');
  await w.run('sb_1');
  w.running.delete('sb_1');
  let calls = 0;
  const once = w.routes.on(acme, 'sb_1', async (sid) => {
    calls++;
    throw notRunningHere(sid);
  });
  await assert.rejects(once, (e: WarrenError) => e.code === 'conflict' && e.details.running === false);
  assert.equal(calls, 1);
  assert.equal(w.reads(), 2);
});

test('other errors of a call on a route pass as they are, with no store read', async () => {
  const w = world();
  w.add('sb_1');
  await w.run('sb_1');
  w.end('sb_1');
  const gone = new WarrenError('unavailable', 'the sandbox went away while the command ran');
  await assert.rejects(
    w.routes.on(acme, 'sb_1', async () => {
      throw gone;
    }),
    (e) => e === gone,
  );
  assert.equal(w.reads(), 1);
});

test('an end recorded while a store read is under way: that read teaches no route', async () => {
  const w = world();
  w.add('sb_1');
  let release!: () => void;
  w.hold(new Promise<void>((r) => (release = r)));
  const reading = w.run('sb_1');
  w.routes.forget('sb_1');
  w.hold(null);
  release();
  assert.equal(await reading, 'n1');
  await w.run('sb_1');
  assert.equal(w.reads(), 2);
});

test('a node not ready (joining, down) is not gone to on a route: the store is asked', async () => {
  const w = world();
  w.add('sb_1');
  await w.run('sb_1');
  w.settled.delete('n1');
  assert.equal(await w.run('sb_1'), 'n1');
  assert.equal(w.reads(), 2);
});

test('routes are bounded: at most the most kept, the oldest learned forgotten first', async () => {
  const w = world({ max: 4 });
  for (const id of ['sb_1', 'sb_2', 'sb_3', 'sb_4', 'sb_5']) {
    w.add(id);
    await w.run(id);
  }
  assert.ok(w.routes.size <= 4);
  for (const id of ['sb_3', 'sb_4', 'sb_5']) await w.run(id);
  assert.equal(w.reads(), 5);
  await w.run('sb_1');
  assert.equal(w.reads(), 6);
});

test('a sandbox’s default user comes with its route, and from the store in any state without one', async () => {
  const w = world();
  w.add('sb_1');
  assert.equal(await w.routes.user(acme, 'sb_1'), 'agent');
  await w.run('sb_1');
  assert.equal(await w.routes.user(acme, 'sb_1'), 'agent');
  assert.equal(w.reads(), 1);
  // Ended (E2B's calls that need no live sandbox, a watcher's removal, still answer).
  w.end('sb_1');
  w.routes.forget('sb_1');
  assert.equal(await w.routes.user(acme, 'sb_1'), 'agent');
  await assert.rejects(w.routes.user(other, 'sb_1'), (e: WarrenError) => e.code === 'not_found');
  assert.equal(w.routes.size, 0);
});

test('an admin uses the route its owner’s call taught, and teaches one its owner uses', async () => {
  const w = world();
  w.add('sb_1');
  w.add('sb_2');
  await w.run('sb_1');
  assert.equal(await w.run('sb_1', admin), 'n1');
  await w.run('sb_2', admin);
  await w.run('sb_2');
  assert.equal(w.reads(), 2);
  await assert.rejects(w.run('sb_2', other), (e: WarrenError) => e.code === 'not_found');
});

test('a node that went down or started anew: the routes to it from before are not used; one lost during a read teaches none', async () => {
  const w = world();
  w.add('sb_1');
  await w.run('sb_1');
  w.lose('n1');
  await w.run('sb_1');
  assert.equal(w.reads(), 2);
  await w.run('sb_1');
  assert.equal(w.reads(), 2);
  let release!: () => void;
  w.hold(new Promise<void>((r) => (release = r)));
  w.routes.forget('sb_1');
  const reading = w.run('sb_1');
  w.lose('n1');
  w.hold(null);
  release();
  await reading;
  await w.run('sb_1');
  assert.equal(w.reads(), 4);
});

test('a create that marks its sandbox running teaches its route (its first call reads nothing), unless its end came meanwhile or the mark failed', async () => {
  const w = world();
  for (const id of ['sb_1', 'sb_2', 'sb_3']) w.add(id);
  const recs = ['sb_1', 'sb_2', 'sb_3'].map((id) => sandboxRecord(id, 'acme', { state: 'creating' }));
  const marked = await w.routes.started(
    recs,
    async () => {
      // A delete of sb_2 recorded while the mark was being written; sb_3's mark lost to it.
      w.routes.forget('sb_2');
      return new Set(['sb_1', 'sb_2']);
    },
    (ids, id) => ids.has(id),
  );
  assert.deepEqual([...marked], ['sb_1', 'sb_2']);
  assert.equal(w.routes.size, 1);
  assert.equal(await w.run('sb_1'), 'n1');
  assert.equal(w.reads(), 0);
  await w.run('sb_2');
  await w.run('sb_3');
  assert.equal(w.reads(), 2);
});

test('a node lost between a create’s placement and its mark: the create teaches no route', async () => {
  const w = world();
  w.add('sb_1');
  const placedAt = 0;
  w.lose('n1');
  await w.routes.started(
    [sandboxRecord('sb_1', 'acme', { state: 'creating' })],
    async () => true,
    (ok) => ok,
    placedAt,
  );
  assert.equal(w.routes.size, 0);
  await w.routes.started(
    [sandboxRecord('sb_1', 'acme', { state: 'creating' })],
    async () => true,
    (ok) => ok,
  );
  assert.equal(w.routes.size, 1);
});
