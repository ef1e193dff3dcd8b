import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Command } from './command.js';
import { MAX_FINISHED_COMMANDS_LISTED } from '@warren/api';
import { FINISHED_KEPT_PER_SANDBOX, listedCommands, pruneCommands, pruneDue } from './commands.js';
import type { Live } from './live.js';

/** A sandbox's command table alone (what pruning reads and writes). */
function liveWith(commands: Array<[string, { done: boolean; finishedAt: number | null; retainedBytes: number }]>): Live {
  const l = { commands: new Map(), requestIds: new Map(), requestIdOf: new Map(), prunedAt: 0 } as unknown as Live;
  for (const [id, c] of commands) {
    l.commands.set(id, { ...c, release: () => undefined } as unknown as Command);
    l.requestIds.set(`req-${id}`, id);
    l.requestIdOf.set(id, `req-${id}`);
  }
  return l;
}

test('a sandbox keeps its newest finished commands up to the count, whatever their age; running ones are never dropped', () => {
  const now = 1_000_000;
  const finished = FINISHED_KEPT_PER_SANDBOX + 500;
  const l = liveWith([
    ['run-first', { done: false, finishedAt: null, retainedBytes: 0 }],
    ...Array.from(
      { length: finished },
      (_, i) => [`c${i}`, { done: true, finishedAt: now - 1000, retainedBytes: 0 }] as [string, { done: boolean; finishedAt: number; retainedBytes: number }],
    ),
    ['run-last', { done: false, finishedAt: null, retainedBytes: 0 }],
  ]);
  // Past the count by a quarter: due at once, not only once a second.
  l.prunedAt = now;
  assert.equal(pruneDue(l, now), true);
  pruneCommands(l, now, 10 * 60_000);
  const kept = [...l.commands.keys()];
  assert.equal(kept.filter((id) => id.startsWith('c')).length, FINISHED_KEPT_PER_SANDBOX);
  assert.ok(l.commands.has('run-first') && l.commands.has('run-last'));
  // The oldest went, the newest stayed; a forgotten command's requestId goes with it.
  assert.equal(l.commands.has('c0'), false);
  assert.equal(l.requestIds.has('req-c0'), false);
  assert.equal(l.commands.has(`c${finished - 1}`), true);
  assert.equal(l.commands.has(`c${finished - FINISHED_KEPT_PER_SANDBOX}`), true);
  assert.equal(l.commands.has(`c${finished - FINISHED_KEPT_PER_SANDBOX - 1}`), false);
  assert.equal(pruneDue(l, now + 10), false);
});

test('finished commands past retention go, and the oldest past the output budget, within the count', () => {
  const now = 1_000_000;
  const l = liveWith([
    ['old', { done: true, finishedAt: now - 11 * 60_000, retainedBytes: 10 }],
    ['big', { done: true, finishedAt: now - 1000, retainedBytes: 60 * 2 ** 20 }],
    ['big2', { done: true, finishedAt: now - 500, retainedBytes: 10 * 2 ** 20 }],
    ['recent', { done: true, finishedAt: now - 100, retainedBytes: 10 }],
  ]);
  pruneCommands(l, now, 10 * 60_000);
  assert.deepEqual([...l.commands.keys()], ['big2', 'recent']);
});

test("a sandbox's commands as listed: running ones; with finished, the newest finished by their end too; never a session's", () => {
  const c = (id: string, pid: number, finishedAt: number | null) => ({ id, pid, finishedAt, done: finishedAt !== null });
  const all = [
    c('run', 10, null),
    c('session', 0, null),
    c('ended-late', 11, 900),
    ...Array.from({ length: MAX_FINISHED_COMMANDS_LISTED }, (_, i) => c(`f${i}`, 20 + i, 100 + i)),
    c('session-ended', 0, 950),
  ];
  assert.deepEqual(
    listedCommands(all, false).map((x) => x.id),
    ['run'],
  );
  const listed = listedCommands(all, true).map((x) => x.id);
  // In the order they started; the one that finished first of all is left out.
  assert.equal(listed.length, 1 + MAX_FINISHED_COMMANDS_LISTED);
  assert.deepEqual(listed.slice(0, 3), ['run', 'ended-late', 'f1']);
  assert.equal(listed.includes('f0'), false);
  assert.equal(listed.includes('session-ended'), false);
});
