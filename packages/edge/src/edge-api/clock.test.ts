import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CLOCKED, CLOCK_SAMPLE_AGE_MS, ClockOffset, shiftEvent } from './clock.js';
import type { EdgeSandboxSpec, EdgeSandboxState } from '../lifecycle/edge-spec.js';

test('the offset is the edge clock against the middle of the round trip; the shortest round trip is kept until it is old', () => {
  const c = new ClockOffset();
  assert.equal(c.offsetMs, null);
  c.sample(1000, 3_601_010, 1020);
  assert.equal(c.offsetMs, 3_600_000);
  // A longer round trip bounds it less tightly: not taken.
  c.sample(2000, 3_602_900, 2400);
  assert.equal(c.offsetMs, 3_600_000);
  // A shorter one is.
  c.sample(3000, 3_603_004, 3010);
  assert.equal(c.offsetMs, 3_599_999);
  // Once the kept one is old, the next is taken whatever its round trip (the edge's clock was stepped).
  c.sample(3010 + CLOCK_SAMPLE_AGE_MS + 1, 3010 + CLOCK_SAMPLE_AGE_MS + 1 + 50 - 7_200_000, 3010 + CLOCK_SAMPLE_AGE_MS + 101);
  assert.equal(c.offsetMs, -7_200_000);
});

test('two processes on one clock never see an offset: one within half the round trip is none', () => {
  const c = new ClockOffset();
  // Date.now in ms: sent <= edge <= received, whatever the rounding.
  for (const [s, e, r] of [
    [100, 100, 100],
    [100, 101, 101],
    [100, 100, 101],
    [100, 103, 103],
    [100, 100, 107],
  ] as const) {
    c.sample(s, e, r);
    assert.equal(c.offsetMs, 0, `${s} ${e} ${r}`);
  }
});

test('times go to the edge moved by its offset and come back moved by minus it; untimed values stay as they were', () => {
  const spec = { id: 'sb_a', lastActivityMs: 1000, expiresAtMs: 61_000 } as EdgeSandboxSpec;
  const [sent] = CLOCKED.create!.args!([spec, []], 500) as [EdgeSandboxSpec];
  assert.deepEqual([sent.lastActivityMs, sent.expiresAtMs, sent.id], [1500, 61_500, 'sb_a']);
  assert.equal(spec.expiresAtMs, 61_000, 'the caller’s spec is not changed');
  const noTtl = CLOCKED.adopt!.args!([{ ...spec, expiresAtMs: null }], 500) as [EdgeSandboxSpec];
  assert.equal(noTtl[0].expiresAtMs, null);
  assert.deepEqual(CLOCKED.setExpiry!.args!(['sb_a', 10_000], -300), ['sb_a', 9700]);
  assert.deepEqual(CLOCKED.setExpiry!.args!(['sb_a', null], -300), ['sb_a', null]);
  const state = { id: 'sb_a', paused: false, lastActivityMs: 1500, expiresAtMs: 61_500, usage: null, network: null } as EdgeSandboxState;
  assert.deepEqual(CLOCKED.sandboxes!.result!([state], -500), [{ ...state, lastActivityMs: 1000, expiresAtMs: 61_000 }]);
  const many = CLOCKED.createMany!.result!(
    { outcomes: [{ state }, { error: { code: 'resource_exhausted', message: 'full', details: {} } }], load: {} },
    -500,
  ) as {
    outcomes: Array<{ state?: EdgeSandboxState; error?: unknown }>;
  };
  assert.equal(many.outcomes[0]!.state!.expiresAtMs, 61_000);
  assert.deepEqual(many.outcomes[1], { error: { code: 'resource_exhausted', message: 'full', details: {} } });
  assert.deepEqual(shiftEvent({ seq: 1, type: 'state', id: 'sb_a', paused: true, expiresAtMs: 61_500 }, -500), {
    seq: 1,
    type: 'state',
    id: 'sb_a',
    paused: true,
    expiresAtMs: 61_000,
  });
  assert.deepEqual(shiftEvent({ seq: 2, type: 'died', id: 'sb_a' }, -500), { seq: 2, type: 'died', id: 'sb_a' });
});
