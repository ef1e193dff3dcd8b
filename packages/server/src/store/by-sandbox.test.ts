import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { SandboxRecord, Store } from './store.js';
import { PgStore } from './pg-store.js';
import { SqliteStore } from './sqlite-store.js';
import { startTestPostgres, type TestPostgres } from '../testing/postgres.js';
import { postgresStores, sqliteStores, type StoreKind } from '../testing/store-places.js';
import { sandboxRecord } from '../testing/sandbox-record.js';

// What a sandbox's page and the image catalogue read: one sandbox's events, and the live
// sandboxes by the image they were created from; on each kind of store.
let server: Promise<TestPostgres> | undefined;
after(async () => {
  await (await server?.catch(() => undefined))?.stop();
});
const pgServer = (): Promise<TestPostgres> => (server ??= startTestPostgres());
const KINDS: StoreKind[] = [sqliteStores, postgresStores(pgServer)];

const record = (id: string, tenant: string, image: string, state: SandboxRecord['state'] = 'running'): SandboxRecord =>
  sandboxRecord(id, tenant, { image, state });

async function withStore(kind: StoreKind, fn: (s: Store) => Promise<void>): Promise<void> {
  const place = await kind.place();
  try {
    await fn(await place.open());
  } finally {
    await place.remove();
  }
}

for (const kind of KINDS) {
  test(`${kind.name}: one sandbox's events in order after a seq, its tenant's only, settled or not`, async () => {
    await withStore(kind, async (s) => {
      await s.events.append([
        { tenant: 't1', type: 'created', data: { sandbox: 'sb_a' } },
        { tenant: 't1', type: 'created', data: { sandbox: 'sb_b' } },
        { tenant: 't1', type: 'forked', data: { sandbox: 'sb_a', children: ['sb_c'] } },
        { tenant: 't1', type: 'lease_lapsed', data: { sandbox: null, lease: 'ls_1' } },
        { tenant: 't2', type: 'created', data: { sandbox: 'sb_a' } },
      ]);
      await s.events.append([{ tenant: 't1', type: 'ended', data: { sandbox: 'sb_a', end: { reason: 'deleted' } } }]);
      const a = await s.events.ofSandbox('t1', 'sb_a', 0, 10);
      assert.deepEqual(
        a.map((e) => [e.type, e.data.sandbox]),
        [
          ['created', 'sb_a'],
          ['forked', 'sb_a'],
          ['ended', 'sb_a'],
        ],
      );
      assert.deepEqual(a[1]!.data.children, ['sb_c']);
      assert.deepEqual(
        (await s.events.ofSandbox('t1', 'sb_a', a[0]!.seq, 1)).map((e) => e.type),
        ['forked'],
      );
      assert.deepEqual(
        (await s.events.ofSandbox('t2', 'sb_a', 0, 10)).map((e) => e.tenant),
        ['t2'],
      );
      assert.deepEqual(await s.events.ofSandbox('t1', 'sb_c', 0, 10), []);
    });
  });

  test(`${kind.name}: live sandboxes counted by image, per tenant or all; a list filtered by image`, async () => {
    await withStore(kind, async (s) => {
      await s.insertSandboxes([
        record('sb_1', 't1', 'img:a'),
        record('sb_2', 't1', 'img:a', 'paused'),
        record('sb_3', 't1', 'img:b', 'stopped'),
        record('sb_4', 't2', 'img:a', 'creating'),
        record('sb_5', 't2', 'img:b'),
      ]);
      assert.deepEqual([...(await s.sandboxImages.counts('t1'))], [['img:a', 2]]);
      assert.deepEqual([...(await s.sandboxImages.counts(null))].sort(), [
        ['img:a', 3],
        ['img:b', 1],
      ]);
      assert.deepEqual(await s.sandboxImages.of('img:a', 't1', 1), { count: 2, ids: ['sb_1'] });
      assert.deepEqual(await s.sandboxImages.of('img:a', null, 5), { count: 3, ids: ['sb_1', 'sb_2', 'sb_4'] });
      assert.deepEqual(await s.sandboxImages.of('img:a', null, 5, ['paused']), { count: 1, ids: ['sb_2'] });
      assert.deepEqual(await s.sandboxImages.of('img:c', null, 5), { count: 0, ids: [] });
      assert.deepEqual(
        (await s.listSandboxes({ tenant: 't1', image: 'img:b', limit: 10 })).map((r) => r.id),
        ['sb_3'],
      );
    });
  });
}

/** An events table as stores before the `sandbox` column made it, with one event in it. */
const OLD_EVENTS = `CREATE TABLE events (seq %SERIAL% PRIMARY KEY, tenant TEXT NOT NULL, at BIGINT NOT NULL, type TEXT NOT NULL, data %JSON% NOT NULL);
INSERT INTO events (tenant, at, type, data) VALUES ('t1', 1, 'created', '{"sandbox":"sb_old"}')`;

test('a store from before events had their sandbox column gets it, filled in: SQLite and PostgreSQL', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-store-'));
  try {
    const file = join(dir, 'warren.db');
    const old = new Database(file);
    old.exec(OLD_EVENTS.replace('%SERIAL%', 'INTEGER').replace('%JSON%', 'TEXT'));
    old.close();
    const s = new SqliteStore(file);
    assert.deepEqual(
      (await s.events.ofSandbox('t1', 'sb_old', 0, 10)).map((e) => e.type),
      ['created'],
    );
    await s.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const url = await (await pgServer()).createDatabase(`old_events_${process.pid}`);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(OLD_EVENTS.replace('%SERIAL%', 'BIGSERIAL').replace('%JSON%', 'JSONB'));
  await c.end();
  const p = await PgStore.open(url, { max: 2 });
  try {
    assert.deepEqual(
      (await p.events.ofSandbox('t1', 'sb_old', 0, 10)).map((e) => e.type),
      ['created'],
    );
  } finally {
    await p.close();
  }
});
