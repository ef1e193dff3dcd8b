import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { SqliteStore } from './sqlite-store.js';
import { endNow, type SandboxRecord } from './store.js';
import { sandboxRecord } from '../testing/sandbox-record.js';

/** Every index of the sandboxes table: its name, its columns and its partial WHERE, if any. */
function indexes(file: string): Array<{ name: string; cols: string[]; sql: string }> {
  const db = new Database(file, { readonly: true });
  try {
    return db
      .prepare<[], { name: string; sql: string | null }>("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sandboxes'")
      .all()
      .map((i) => ({
        name: i.name,
        cols: db
          .prepare<[], { name: string }>(`PRAGMA index_info(${JSON.stringify(i.name)})`)
          .all()
          .map((c) => c.name),
        sql: i.sql ?? '',
      }));
  } finally {
    db.close();
  }
}

test("no index of SQLite's sandboxes names the state: a create's mark (creating → running) writes the row alone; live sandboxes are found by `live`", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-live-'));
  const file = join(dir, 'warren.db');
  const s = new SqliteStore(file);
  try {
    const named = indexes(file).filter((i) => i.cols.includes('state') || /\bstate\b/.test(i.sql));
    assert.deepEqual(named, [], 'an index naming the state is rewritten by every mark');
    assert.ok(indexes(file).some((i) => i.name === 'sandboxes_live'));
    // The flag follows every way a record changes state.
    await s.insertSandboxes([sandboxRecord('a', 't1', { state: 'creating' }), sandboxRecord('b', 't1', { state: 'creating' })]);
    await s.insertSandboxes([sandboxRecord('c', 't1', { state: 'failed' })]);
    assert.deepEqual(await s.markStarted(['a']), ['a']);
    assert.equal(await s.updateSandbox('a', { state: 'paused' }), true);
    const usage = async (): Promise<number> => (await s.usageByTenant()).find((u) => u.tenant === 't1')?.sandboxes ?? 0;
    assert.equal(await usage(), 2, 'a (paused) and b (creating) are live, c (failed) is not');
    assert.deepEqual(
      (await s.staleCreating(-1000, 10)).map((r) => r.id),
      ['b'],
    );
    await s.endSandbox('b', { state: 'stopped', error: null, end: endNow('deleted') });
    assert.equal(await usage(), 1);
    assert.deepEqual(await s.staleCreating(-1000, 10), []);
    assert.deepEqual(await s.failLiveOnNode('n1', { code: 'unavailable', message: 'gone' }, endNow('infra')), ['a']);
    assert.equal(await usage(), 0);
    assert.deepEqual(await s.failLiveOnNode('n1', { code: 'unavailable', message: 'gone' }, endNow('infra')), []);
  } finally {
    await s.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test('a SQLite file from before the `live` column gets it filled from each record’s state, and loses the indexes that named the state', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-live-'));
  const file = join(dir, 'warren.db');
  try {
    // The table and indexes as they were.
    const old = new Database(file);
    old.exec(`CREATE TABLE sandboxes (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, node TEXT NOT NULL, state TEXT NOT NULL, created_at INTEGER NOT NULL, request_id TEXT, doc TEXT NOT NULL);
      CREATE INDEX sandboxes_node ON sandboxes (node, state);
      CREATE INDEX sandboxes_state ON sandboxes (state, created_at);`);
    const put = old.prepare('INSERT INTO sandboxes (id, tenant, node, state, created_at, request_id, doc) VALUES (?, ?, ?, ?, ?, NULL, ?)');
    const states: Array<SandboxRecord['state']> = ['creating', 'running', 'paused', 'stopped', 'failed'];
    for (const st of states) put.run(`sb_${st}`, 't1', 'n1', st, 1, JSON.stringify(sandboxRecord(`sb_${st}`, 't1', { state: st })));
    old.close();
    const s = new SqliteStore(file);
    try {
      assert.equal((await s.usageByTenant()).find((u) => u.tenant === 't1')?.sandboxes, 3);
      assert.deepEqual(
        (await s.staleCreating(-1000, 10)).map((r) => r.id),
        ['sb_creating'],
      );
      assert.deepEqual(
        indexes(file)
          .map((i) => i.name)
          .filter((n) => n === 'sandboxes_node' || n === 'sandboxes_state'),
        [],
      );
      assert.deepEqual((await s.failLiveOnNode('n1', { code: 'unavailable', message: 'gone' }, endNow('infra'))).sort(), [
        'sb_creating',
        'sb_paused',
        'sb_running',
      ]);
      await s.insertSandboxes([sandboxRecord('sb_new', 't1', { state: 'running' })]);
    } finally {
      await s.close();
    }
    // Written meanwhile by a build from before the flag (its inserts leave 0, its ends leave 1):
    // set right at the next open.
    const older = new Database(file);
    older
      .prepare("INSERT INTO sandboxes (id, tenant, node, state, created_at, doc) VALUES ('sb_old', 't1', 'n1', 'running', 1, ?)")
      .run(JSON.stringify(sandboxRecord('sb_old', 't1')));
    older.exec("UPDATE sandboxes SET state = 'stopped' WHERE id = 'sb_new'");
    older.close();
    const again = new SqliteStore(file);
    try {
      assert.equal((await again.usageByTenant()).find((u) => u.tenant === 't1')?.sandboxes, 1);
      assert.deepEqual(await again.failLiveOnNode('n1', { code: 'unavailable', message: 'gone' }, endNow('infra')), ['sb_old']);
    } finally {
      await again.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
