import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { CpuLoad, checkAdmission, committableMemoryMiB, memoryRefusal, type AdmissionState, type EdgeCapacity } from './admission.js';

// A 2-core, 24 GiB node with the defaults warren up gives it.
const cap: EdgeCapacity = { cpu: 128, busyCpu: 1.8, memoryMiB: 36_000, sandboxes: 4096, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 24_000 };
const idle: AdmissionState = { cpu: 0, memoryMiB: 0, sandboxes: 0, paused: 0, cpuUsed: 0.05 };

function refusal(f: () => void): { resource?: unknown; message: string } {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof WarrenError && e.code === 'resource_exhausted', String(e));
    return { resource: e.details.resource, message: e.message };
  }
  assert.fail('admitted');
}

test('64 mostly idle one-CPU sandboxes fit on a 2-core node: CPU limits are caps, not reservations', () => {
  let s = { ...idle };
  for (let i = 0; i < 64; i++) {
    checkAdmission('n1', cap, s, { cpu: 1, memoryMiB: 512 });
    s = { ...s, cpu: s.cpu + 1, memoryMiB: s.memoryMiB + 512, sandboxes: s.sandboxes + 1 };
  }
  assert.equal(s.cpu, 64);
});

test('memory is admitted by requests (a quarter of the limit by default) against the memory plus what zram holds beyond its footprint', () => {
  // This machine: 24,105 MiB and a zram swap of half of it, assumed to compress 2 : 1.
  const memoryMiB = committableMemoryMiB({ memoryMiB: 24_105, zramMiB: 12_052 });
  assert.equal(memoryMiB, 24_105 + 6026);
  const node = { ...cap, memoryMiB };
  // 100 busybox and 64 debian-python sandboxes of the default 512 MiB: 164 × 128 MiB committed.
  let s = { ...idle };
  for (let i = 0; i < 164; i++) {
    checkAdmission('n1', node, s, { cpu: 1, memoryMiB: 512 });
    s = { ...s, memoryMiB: s.memoryMiB + 128, sandboxes: s.sandboxes + 1 };
  }
  assert.equal(s.memoryMiB, 20_992);
  // By their limits (what the node counted before) they stop at 58.
  assert.equal(Math.floor(memoryMiB / 512), 58);
  // A request named is what counts; the limit is checked only against one sandbox's most.
  const full = refusal(() => checkAdmission('n1', node, { ...idle, memoryMiB: memoryMiB - 100 }, { cpu: 1, memoryMiB: 512, memoryRequestMiB: 101 }));
  assert.equal(full.resource, 'memory');
  assert.match(full.message, /memory requests are committed, and this sandbox requests 101 MiB/);
  checkAdmission('n1', node, { ...idle, memoryMiB: memoryMiB - 100 }, { cpu: 1, memoryMiB: 4096, memoryRequestMiB: 100 });
  // The operator's overcommit replaces the zram rule; no zram: the memory alone.
  assert.equal(committableMemoryMiB({ memoryMiB: 1000, zramMiB: 500, overcommit: 1.5 }), 1500);
  assert.equal(committableMemoryMiB({ memoryMiB: 1000, zramMiB: 0 }), 1000);
  assert.equal(committableMemoryMiB({ memoryMiB: 1000, zramMiB: 900, ratio: 3 }), 1600);
});

test('a node really out of memory refuses naming memory, with the numbers', () => {
  const e = memoryRefusal('n1', { availableMiB: 100.7, floorMiB: 128, requestMiB: 64, paused: 5 });
  assert.equal(e.code, 'resource_exhausted');
  assert.equal(e.details.resource, 'memory');
  assert.match(
    e.message,
    /out of memory: 100 MiB are available, it keeps 128 MiB free and this sandbox requests 64 MiB; its idle sandboxes are paged out and paused \(5\)/,
  );
});

test('a node that is really busy refuses, and says which resource', () => {
  const busy = refusal(() => checkAdmission('n1', cap, { ...idle, cpuUsed: 1.95 }, { cpu: 0.1, memoryMiB: 64 }));
  assert.equal(busy.resource, 'cpu');
  assert.match(busy.message, /use 1\.95 cores/);
  assert.equal(refusal(() => checkAdmission('n1', cap, { ...idle, memoryMiB: 35_900 }, { cpu: 1, memoryMiB: 512 })).resource, 'memory');
  assert.equal(refusal(() => checkAdmission('n1', cap, { ...idle, sandboxes: 4096 }, { cpu: 1, memoryMiB: 1 })).resource, 'sandboxes');
  // The sum of limits stays bounded, however idle the node.
  assert.equal(refusal(() => checkAdmission('n1', cap, { ...idle, cpu: 127.5 }, { cpu: 1, memoryMiB: 1 })).resource, 'cpuLimits');
  // One sandbox's own size is checked against the node's.
  assert.match(refusal(() => checkAdmission('n1', cap, idle, { cpu: 3, memoryMiB: 1 })).message, /at most 2 CPUs/);
  // Without busyCpu there is no usage check.
  checkAdmission('n1', { ...cap, busyCpu: undefined }, { ...idle, cpuUsed: 9 }, { cpu: 1, memoryMiB: 1 });
});

test('CPU load: samples a second or more apart, smoothed over the window', () => {
  let now = 0;
  const load = new CpuLoad(() => now, 10_000);
  load.sample(0);
  assert.equal(load.cores, 0);
  // Two cores busy for 30 s: the smoothed load comes close to 2.
  for (let i = 1; i <= 30; i++) {
    now = i * 1000;
    load.sample(i * 2);
  }
  assert.equal(load.recent, 2);
  assert.ok(load.cores > 1.9 && load.cores <= 2, String(load.cores));
  // Samples closer than a second are ignored.
  now += 500;
  load.sample(1000);
  assert.equal(load.recent, 2);
  // Idle again: it falls under a tenth of a core within 30 s.
  const base = 60;
  for (let i = 1; i <= 30; i++) {
    now = 30_000 + i * 1000;
    load.sample(base);
  }
  assert.ok(load.cores < 0.1, String(load.cores));
});
