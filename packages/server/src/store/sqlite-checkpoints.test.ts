import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteStore } from './sqlite-store.js';
import { sandboxRecord } from '../testing/sandbox-record.js';

test("the SQLite store's log is copied into the database by a thread of its own, long before the writer's threshold", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-checkpoints-'));
  const file = join(dir, 'warren.db');
  const s = new SqliteStore(file);
  try {
    const before = (await stat(file)).size;
    // A couple of hundred pages written to the log: far under the writer's own threshold, and
    // under SQLite's default of 1,000 too (so the old writer made no checkpoint here either).
    assert.equal(s.walCheckpointPages(), 20_000);
    for (let i = 0; i < 20; i++) {
      await s.insertSandboxes([sandboxRecord(`sb_${i}`, 't1', { state: 'creating' })]);
      await s.markStarted([`sb_${i}`]);
    }
    // Only a checkpoint writes the database file; the writer here never made one.
    const deadline = Date.now() + 10_000;
    while ((await stat(file)).size <= before) {
      assert.ok(Date.now() < deadline, 'no checkpoint within 10 s');
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal((await s.getSandbox('sb_19'))?.state, 'running');
  } finally {
    await s.close();
    await rm(dir, { recursive: true, force: true });
  }
  // Closed, its checkpoint thread is gone: nothing holds this process open.
});
