import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MetricsHistory, historyPoint, type HistoryTotals } from './history.js';

const totals = (o: Partial<HistoryTotals> = {}): HistoryTotals => ({
  creates: 0,
  commands: 0,
  commandErrors: 0,
  fnCalls: 0,
  running: 0,
  paused: 0,
  cpuUsed: 0,
  memoryUsedMiB: 0,
  ...o,
});

test('a point: counters as rates over the interval, levels as at its end; a counter that went back counts 0', () => {
  const p = historyPoint(
    totals({ creates: 10, commands: 100, fnCalls: 50 }),
    totals({ creates: 30, commands: 150, commandErrors: 5, fnCalls: 20, running: 7, paused: 3, cpuUsed: 1.234, memoryUsedMiB: 99.6 }),
    10,
    0,
  );
  assert.deepEqual(p, {
    at: '1970-01-01T00:00:00.000Z',
    createsPerSecond: 2,
    commandsPerSecond: 5,
    commandErrorsPerSecond: 0.5,
    fnCallsPerSecond: 0,
    running: 7,
    paused: 3,
    cpuUsed: 1.23,
    memoryUsedMiB: 100,
  });
});

test('the history keeps the last points, skips a failed sample, and starts once it has two', async () => {
  let now = 0;
  let creates = 0;
  let fail = false;
  const h = new MetricsHistory({
    now: () => now,
    keep: 3,
    sample: async () => {
      if (fail) throw new Error('node unreachable');
      return totals({ creates });
    },
  });
  await h.tick();
  assert.deepEqual(h.list(), []);
  for (let i = 1; i <= 5; i++) {
    now += 10_000;
    creates += 10 * i;
    await h.tick();
  }
  assert.deepEqual(
    h.list().map((p) => p.createsPerSecond),
    [3, 4, 5],
  );
  fail = true;
  now += 10_000;
  await h.tick();
  assert.equal(h.list().length, 3);
  // The next sample's rate spans the failed one's interval too.
  fail = false;
  now += 10_000;
  creates += 40;
  await h.tick();
  assert.deepEqual(
    h.list().map((p) => p.createsPerSecond),
    [4, 5, 2],
  );
});
