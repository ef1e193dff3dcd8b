import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Commitments } from './commitments.js';
import type { Live } from './live.js';

/** The fields of a Live the ledger reads. */
const live = (o: { paused: boolean; cpu?: number; memoryMiB?: number; resident?: number; pausing?: boolean; reclaiming?: boolean; backend?: string }): Live =>
  ({
    spec: { paused: o.paused, resources: { cpu: o.cpu ?? 1, memoryMiB: o.memoryMiB ?? 512 } },
    backend: { name: o.backend ?? 'container' },
    pausing: o.pausing ? Promise.resolve() : null,
    reclaim: o.reclaiming ? { abort: () => undefined, done: Promise.resolve() } : null,
    residentWhilePaused: o.resident ?? 0,
  }) as unknown as Live;

const held = (c: Commitments, id: string, l: Live): void => {
  c.reserve(l.spec.resources);
  c.update(id, l);
  c.made();
};

test('a paused sandbox is relieved once its pause and page-out are over: no CPU, its request less what stayed resident', () => {
  const c = new Commitments();
  held(c, 'a', live({ paused: true, pausing: true }));
  held(c, 'b', live({ paused: true, reclaiming: true, cpu: 0.5, memoryMiB: 256 }));
  held(c, 'c', live({ paused: false }));
  // Requests: 128 + 64 + 128 MiB (a quarter of the limit by default).
  assert.deepEqual(c.committed(), { cpu: 2.5, memoryMiB: 320, sandboxes: 3, paused: 0 });
  // 3 MiB resident (rounded up) leaves 125 of a's 128 off the committed memory.
  c.update('a', live({ paused: true, resident: 3 * 2 ** 20 - 1 }));
  c.update('b', live({ paused: true, cpu: 0.5, memoryMiB: 256, resident: 2 ** 30 }));
  assert.deepEqual(c.committed(), { cpu: 1, memoryMiB: 195, sandboxes: 3, paused: 2 });
  assert.deepEqual(c.requested(), { cpu: 2.5, memoryMiB: 320 });
  // Counted again as it is now, not twice.
  c.update('a', live({ paused: true, resident: 0 }));
  assert.deepEqual(c.committed(), { cpu: 1, memoryMiB: 192, sandboxes: 3, paused: 2 });
  c.update('a', live({ paused: false }));
  assert.deepEqual(c.committed(), { cpu: 2, memoryMiB: 320, sandboxes: 3, paused: 1 });
  // Gone (twice told): nothing of it stays.
  c.update('b', undefined);
  c.update('b', undefined);
  c.release({ cpu: 0.5, memoryMiB: 256 });
  assert.deepEqual(c.committed(), { cpu: 2, memoryMiB: 256, sandboxes: 2, paused: 0 });
});

test('a create under way counts as a sandbox and by its request until it is held or fails', () => {
  const c = new Commitments();
  c.reserve({ cpu: 1, memoryMiB: 512 });
  assert.deepEqual(c.committed(), { cpu: 1, memoryMiB: 128, sandboxes: 1, paused: 0 });
  c.release({ cpu: 1, memoryMiB: 512 });
  c.made();
  assert.deepEqual(c.committed(), { cpu: 0, memoryMiB: 0, sandboxes: 0, paused: 0 });
  // Taken back after a restart.
  c.update('x', live({ paused: false }));
  c.hold({ cpu: 1, memoryMiB: 512 });
  assert.deepEqual(c.committed(), { cpu: 1, memoryMiB: 128, sandboxes: 1, paused: 0 });
});

test('sandboxes and paused ones by backend: every named backend listed, a paused one counted as soon as it is paused', () => {
  const c = new Commitments();
  held(c, 'a', live({ paused: false }));
  held(c, 'b', live({ paused: true, reclaiming: true }));
  held(c, 'v', live({ paused: false, backend: 'microvm' }));
  assert.deepEqual(c.byBackend(['container', 'microvm', 'vm']), {
    container: { sandboxes: 2, paused: 1 },
    microvm: { sandboxes: 1, paused: 0 },
    vm: { sandboxes: 0, paused: 0 },
  });
  c.update('b', live({ paused: false }));
  c.update('v', undefined);
  assert.deepEqual(c.byBackend(['container', 'microvm']), { container: { sandboxes: 2, paused: 0 }, microvm: { sandboxes: 0, paused: 0 } });
});

test('sums of fractional CPUs do not drift over many pauses and resumes', () => {
  const c = new Commitments();
  const cpuOf = (k: number): number => 0.1 + k * 0.01;
  for (let k = 0; k < 7; k++) held(c, `s${k}`, live({ paused: false, cpu: cpuOf(k) }));
  const paused = new Map<number, boolean>();
  for (let i = 0; i < 10_000; i++) {
    paused.set(i % 7, i % 3 !== 0);
    c.update(`s${i % 7}`, live({ paused: i % 3 !== 0, cpu: cpuOf(i % 7) }));
  }
  const running = [...paused].filter(([, p]) => !p).reduce((sum, [k]) => sum + cpuOf(k), 0);
  assert.equal(c.committed().cpu, Math.round(running * 1e6) / 1e6);
  for (let k = 0; k < 7; k++) {
    c.update(`s${k}`, undefined);
    c.release({ cpu: cpuOf(k), memoryMiB: 512 });
  }
  assert.deepEqual(c.committed(), { cpu: 0, memoryMiB: 0, sandboxes: 0, paused: 0 });
});
