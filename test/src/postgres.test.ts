import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { startTestPostgres, type TestPostgres } from '@warren/server';
import { type WarrenError, Warren } from '@warren/sdk';
import { ownedTempDir, startTestWarren, type TestWarren } from './harness.js';

describe('a node whose control plane keeps its state in PostgreSQL (warren up --database)', () => {
  let pgs: TestPostgres;
  before(async () => {
    pgs = await startTestPostgres();
  });
  after(async () => {
    await pgs?.stop();
  });

  test('sandboxes, keys and quotas live in the database and survive a restart of the node', async () => {
    const url = await pgs.createDatabase('node_restart');
    const first = await startTestWarren({ database: url });
    let second: TestWarren | undefined;
    try {
      const key = await first.client.createKey({ tenant: 'team-a', role: 'user', quota: { sandboxes: 1 } });
      const a = new Warren({ url: first.url, apiKey: key });
      const sb = await a.sandboxes.create({ image: 'busybox:latest', labels: { on: 'pg' } });
      await sb.files.write('/tmp/kept', 'kept');
      await assert.rejects(a.sandboxes.create({ image: 'busybox:latest' }), (e: WarrenError) => e.code === 'resource_exhausted');
      // The state is in PostgreSQL, none of it in a SQLite file of the data dir.
      assert.equal(existsSync(join(first.dataDir, 'warren.db')), false);
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        const rows = (await c.query<{ id: string; tenant: string; state: string }>('SELECT id, tenant, state FROM sandboxes')).rows;
        assert.deepEqual(rows, [{ id: sb.id, tenant: 'team-a', state: 'running' }]);
      } finally {
        await c.end();
      }
      await first.close({ keep: true, removeData: false });
      second = await startTestWarren({ database: url, dataDir: first.dataDir });
      const b = new Warren({ url: second.url, apiKey: key });
      const again = await b.sandboxes.get(sb.id);
      assert.equal(again.info.state, 'running');
      assert.equal(await again.files.readText('/tmp/kept'), 'kept');
      assert.deepEqual(
        (await b.sandboxes.list({ labels: { on: 'pg' } })).sandboxes.map((s) => s.id),
        [sb.id],
      );
      await assert.rejects(
        b.sandboxes.create({ image: 'busybox:latest' }),
        (e: WarrenError) => e.code === 'resource_exhausted',
        'the quota holds after the restart',
      );
      await again.delete();
    } finally {
      await second?.close();
      await first.close();
    }
  });

  test('a database that is not PostgreSQL or cannot be opened is a clear error at start, its password not shown', async () => {
    const dataDir = await ownedTempDir('test-');
    try {
      await assert.rejects(
        startTestWarren({ dataDir, database: 'mysql://u@db.example/w' }),
        (e: WarrenError) => e.code === 'invalid_argument' && /PostgreSQL/.test(e.message),
      );
      const missing = pgs.url('no_such_db').replace('warren@', 'warren:s3cret@');
      await assert.rejects(
        startTestWarren({ dataDir, database: missing }),
        (e: WarrenError) => e.code === 'unavailable' && /no_such_db/.test(e.message) && !e.message.includes('s3cret'),
      );
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
