import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { FnWorkers, type FnGroupSpec } from './fn-workers.js';
import type { FnCallSpec } from './fn-call.js';

const group: FnGroupSpec = { image: 'img', layers: ['sha256:1'], builtIn: true, resources: { cpu: 1, memoryMiB: 256, pids: 64 } };
const spec = (code: string): FnCallSpec => ({ language: 'bash', code, env: [], cwd: '/tmp', timeoutMs: 1000, files: [], maxOutputBytes: 1024 });

/** A node whose workers answer each call with its code, when the test lets them. */
function fakeNode(o: { failCreate?: boolean } = {}) {
  const made: string[] = [];
  const destroyed: string[] = [];
  const gates: Array<() => void> = [];
  let n = 0;
  return {
    made,
    destroyed,
    release: () => gates.splice(0).forEach((g) => g()),
    node: {
      newId: () => `sb_${++n}`,
      create: async (id: string) => {
        if (o.failCreate) throw new WarrenError('resource_exhausted', 'the node is full');
        made.push(id);
      },
      destroy: async (id: string) => void destroyed.push(id),
      call: async (_id: string, s: FnCallSpec) => {
        if (s.code !== 'pass') await new Promise<void>((res) => gates.push(res));
        return { stdout: Buffer.from(s.code), stderr: Buffer.alloc(0), exitCode: 0, signal: null, timedOut: false, truncated: false };
      },
    },
  };
}

test('calls start the workers they need (cold), reuse them warm, and count what each tenant holds', async () => {
  const f = fakeNode();
  const w = new FnWorkers(f.node, { maxWorkersPerImage: 2 });
  const calls = [w.run({ tenant: 't', room: null, group, spec: spec('a') }), w.run({ tenant: 't', room: null, group, spec: spec('b') })];
  await new Promise((r) => setImmediate(r));
  while (f.made.length < 2) await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  f.release();
  const [a, b] = await Promise.all(calls);
  assert.equal(a!.stdout, 'a');
  assert.equal(b!.stdout, 'b');
  assert.ok(a!.cold && b!.cold);
  assert.deepEqual(a!.held, { sandboxes: 2, cpu: 2, memoryMiB: 512 });
  const again = w.run({ tenant: 't', room: null, group, spec: spec('c') });
  await new Promise((r) => setImmediate(r));
  f.release();
  assert.equal((await again).cold, false);
  assert.equal(f.made.length, 2);
  assert.equal(w.load().groups[0]!.workers, 2);
  // The load names what each tenant's workers hold: every replica counts them in its quota.
  assert.deepEqual(w.load().tenants, [{ tenant: 't', sandboxes: 2, cpu: 2, memoryMiB: 512 }]);
  assert.ok(a!.heldAt > 0 && a!.heldAt <= performance.timeOrigin + performance.now());
  await w.close();
  assert.deepEqual(f.destroyed.sort(), ['sb_1', 'sb_2']);
});

test("a tenant's room bounds the workers made for it; a node that cannot start one fails what waits, saying it never started", async () => {
  const f = fakeNode();
  const w = new FnWorkers(f.node);
  await assert.rejects(
    w.run({ tenant: 't', room: { sandboxes: 0 }, group, spec: spec('x') }),
    (e: WarrenError) => e.code === 'resource_exhausted' && /quota/.test(e.message),
  );
  assert.equal(f.made.length, 0);
  const full = new FnWorkers(fakeNode({ failCreate: true }).node);
  await assert.rejects(
    full.run({ tenant: 't', room: null, group, spec: spec('x') }),
    (e: WarrenError) => e.code === 'resource_exhausted' && e.details.started === false,
  );
  await w.close();
  await full.close();
});
