import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import type { SandboxRecord, Store, TenantUsage } from './store.js';
import { startTestPostgres, type TestPostgres } from '../testing/postgres.js';
import pg from 'pg';
import { PgStore } from './pg-store.js';
import { postgresStores, sqliteStores, type StoreKind } from '../testing/store-places.js';
import { sandboxRecord } from '../testing/sandbox-record.js';

// The same tests on each kind of store: SQLite (warren up) and PostgreSQL (a cluster), whose
// server starts on the first test that needs it.
let server: Promise<TestPostgres> | undefined;
after(async () => {
  await (await server?.catch(() => undefined))?.stop();
});
const KINDS: StoreKind[] = [sqliteStores, postgresStores(() => (server ??= startTestPostgres()))];

const record = (id: string, tenant: string, more: Partial<SandboxRecord> = {}): SandboxRecord => sandboxRecord(id, tenant, { labels: { job: 'j1' }, ...more });

/** A store on a new place of `kind`; `open` opens another on the same place (a restart, a replica). */
async function withStore(kind: StoreKind, fn: (s: Store, open: () => Promise<Store>) => Promise<void>): Promise<void> {
  const place = await kind.place();
  try {
    await fn(await place.open(), () => place.open());
  } finally {
    await place.remove();
  }
}

/** Waits for `pred` to hold (polling every 5 ms), failing after 5 s. */
async function until(pred: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error('not so after 5 s');
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A quota of `max` sandboxes, checked as SandboxService checks it. */
const atMost =
  (max: number) =>
  (u: TenantUsage): void => {
    if (u.sandboxes + 1 > max) throw new WarrenError('resource_exhausted', 'over quota');
  };

for (const kind of KINDS) {
  test(`${kind.name}: an insert's quota check sees the tenant's live sandboxes only, and a refused insert records nothing (labels neither)`, async () => {
    await withStore(kind, async (s) => {
      const seen: TenantUsage[] = [];
      await s.insertSandbox(record('sb_1', 'a'));
      await s.insertSandbox(record('sb_2', 'a', { state: 'stopped' }));
      await s.insertSandbox(record('sb_3', 'b'));
      await s.insertSandbox(record('sb_4', 'a'), {
        admit: (u) => {
          seen.push(u);
        },
      });
      assert.deepEqual(seen, [{ sandboxes: 1, cpu: 0.5, memoryMiB: 128 }]);
      await assert.rejects(
        s.insertSandbox(record('sb_5', 'a', { labels: { job: 'j2' } }), { admit: atMost(2) }),
        (e: WarrenError) => e.code === 'resource_exhausted',
      );
      assert.equal(await s.getSandbox('sb_5'), undefined);
      assert.deepEqual(await s.listSandboxes({ tenant: 'a', labels: [['job', 'j2']], limit: 10 }), []);
      assert.deepEqual(await s.tenantUsage('a'), { sandboxes: 2, cpu: 1, memoryMiB: 256 });
      assert.deepEqual(await s.usageByTenant(), [
        { tenant: 'a', sandboxes: 2, cpu: 1, memoryMiB: 256 },
        { tenant: 'b', sandboxes: 1, cpu: 0.5, memoryMiB: 128 },
      ]);
    });
  });

  test(`${kind.name}: a batch of sandboxes is recorded at once, its quota checked as one; the running mark takes only those still creating`, async () => {
    await withStore(kind, async (s) => {
      await s.insertSandbox(record('sb_0', 't'));
      const batch = ['sb_1', 'sb_2', 'sb_3'].map((id, i) => record(id, 't', { state: 'creating', labels: { job: 'b', i: String(i) }, requestId: null }));
      await assert.rejects(
        s.insertSandboxes(batch, { admit: (u) => atMost(3)({ ...u, sandboxes: u.sandboxes + batch.length - 1 }) }),
        (e: WarrenError) => e.code === 'resource_exhausted',
      );
      assert.equal(await s.getSandbox('sb_1'), undefined);
      const seen: TenantUsage[] = [];
      await s.insertSandboxes(batch, { admit: (u) => void seen.push(u) });
      assert.deepEqual(seen, [{ sandboxes: 1, cpu: 0.5, memoryMiB: 128 }]);
      assert.deepEqual(
        (await s.listSandboxes({ tenant: 't', labels: [['i', '1']], limit: 10 })).map((r) => r.id),
        ['sb_2'],
      );
      await s.updateSandbox('sb_2', { state: 'stopped' });
      assert.deepEqual((await s.markStarted(['sb_1', 'sb_2', 'sb_3', 'sb_9'])).sort(), ['sb_1', 'sb_3']);
      assert.equal((await s.getSandbox('sb_3'))?.state, 'running');
      assert.equal((await s.getSandbox('sb_2'))?.state, 'stopped');
      assert.deepEqual(await s.tenantUsage('t'), { sandboxes: 3, cpu: 1.5, memoryMiB: 384 });
    });
  });

  test(`${kind.name}: inserts of one tenant through three stores at once (replicas) cannot pass a quota together`, async () => {
    await withStore(kind, async (s, open) => {
      const stores = [s, await open(), await open()];
      // Each insert reads the usage inside its own transaction, under its tenant's lock: a
      // later one sees the earlier rows, whichever store and connection it goes through.
      const results = await Promise.allSettled(Array.from({ length: 9 }, (_, i) => stores[i % 3]!.insertSandbox(record(`sb_${i}`, 't'), { admit: atMost(3) })));
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 3, JSON.stringify(results.map((r) => r.status)));
      assert.equal((await stores[2]!.tenantUsage('t')).sandboxes, 3);
    });
  });

  test(`${kind.name}: a patch changes only what it names; a requestId finds its sandbox; an exec requestId has one first writer`, async () => {
    await withStore(kind, async (s) => {
      await s.insertSandbox(record('sb_1', 'a', { requestId: 'r1' }));
      await s.updateSandbox('sb_1', { state: 'paused', expiresAt: 99 });
      assert.equal(await s.updateSandbox('sb_missing', { state: 'stopped' }), false);
      assert.equal(await s.updateSandbox('sb_1', { state: 'running', expiresAt: 1 }, { from: ['creating'] }), false, 'not from paused');
      assert.equal((await s.getSandbox('sb_1'))?.expiresAt, 99);
      const got = await s.getSandbox('sb_1');
      assert.equal(got?.state, 'paused');
      assert.equal(await s.updateSandbox('sb_1', { state: 'paused' }, { from: ['running', 'paused'] }), true);
      assert.equal(got?.expiresAt, 99);
      assert.equal(got?.lastActivityAt, 1);
      assert.deepEqual(got?.resources, { cpu: 0.5, memoryMiB: 128, pids: 64, diskMiB: null });
      await Promise.all([s.updateSandbox('sb_1', { lastActivityAt: 7 }), s.updateSandbox('sb_1', { error: { code: 'x', message: 'y' } })]);
      const both = await s.getSandbox('sb_1');
      assert.deepEqual([both?.lastActivityAt, both?.error?.code, both?.state], [7, 'x', 'paused'], 'two patches at once both land');
      assert.equal((await s.findByRequestId('a', 'r1'))?.id, 'sb_1');
      assert.equal(await s.findByRequestId('b', 'r1'), undefined);
      assert.deepEqual(
        (await s.liveOnNode('n1')).map((r) => r.id),
        ['sb_1'],
      );
      assert.equal(await s.putExecRequest('sb_1', 'x', 'c1'), true);
      assert.equal(await s.putExecRequest('sb_1', 'x', 'c2'), false);
      assert.equal(await s.execRequest('sb_1', 'x'), 'c1');
      await s.deleteExecRequest('sb_1', 'x');
      assert.equal(await s.putExecRequest('sb_1', 'x', 'c3'), true);
      await s.deleteExecRequests('sb_1');
      assert.equal(await s.execRequest('sb_1', 'x'), undefined);
      await s.deleteSandbox('sb_1');
      assert.equal(await s.getSandbox('sb_1'), undefined);
    });
  });

  test(`${kind.name}: an end is one write: a live sandbox ends once, its exec requestIds go, another tenant's is left alone; activity times in one write`, async () => {
    await withStore(kind, async (s) => {
      await s.insertSandbox(record('sb_1', 'a', { state: 'paused', lastActivityAt: 5 }));
      await s.insertSandbox(record('sb_2', 'a', { state: 'stopped' }));
      await s.putExecRequest('sb_1', 'x', 'c1');
      // Another tenant's: not found to it, and nothing changed.
      assert.equal(await s.endSandbox('sb_1', { state: 'stopped', error: null }, { tenant: 'b' }), undefined);
      assert.equal((await s.getSandbox('sb_1'))?.state, 'paused');
      assert.equal(await s.execRequest('sb_1', 'x'), 'c1');
      // Its own tenant's end answers the record as it was, and records the end.
      const why = { code: 'unavailable', message: 'gone' };
      const before = await s.endSandbox('sb_1', { state: 'failed', error: why }, { tenant: 'a' });
      assert.deepEqual([before?.state, before?.error, before?.lastActivityAt], ['paused', null, 5]);
      const after = await s.getSandbox('sb_1');
      assert.deepEqual([after?.state, after?.error, after?.lastActivityAt, after?.labels], ['failed', why, 5, { job: 'j1' }]);
      assert.equal(await s.execRequest('sb_1', 'x'), undefined);
      // An ended one is answered as it is and stays as it is; a missing one is undefined.
      assert.equal((await s.endSandbox('sb_1', { state: 'stopped', error: null }))?.state, 'failed');
      assert.equal((await s.getSandbox('sb_1'))?.state, 'failed');
      assert.equal((await s.endSandbox('sb_2', { state: 'failed', error: why }))?.state, 'stopped');
      assert.equal((await s.getSandbox('sb_2'))?.error, null);
      assert.equal(await s.endSandbox('sb_missing', { state: 'stopped', error: null }), undefined);
      await s.setActivity([
        { id: 'sb_1', at: 70 },
        { id: 'sb_missing', at: 1 },
        { id: 'sb_2', at: 80 },
      ]);
      await s.setActivity([]);
      assert.deepEqual([(await s.getSandbox('sb_1'))?.lastActivityAt, (await s.getSandbox('sb_2'))?.lastActivityAt], [70, 80]);
      assert.equal((await s.getSandbox('sb_1'))?.state, 'failed');
    });
  });

  test(`${kind.name}: a list filters by tenant, state (or states) and every label, pages in id order either way, and a second store sees it all`, async () => {
    await withStore(kind, async (s, open) => {
      for (let i = 0; i < 5; i++)
        await s.insertSandbox(record(`sb_${i}`, 'a', { state: i === 4 ? 'stopped' : 'running', labels: { job: 'j', n: String(i % 2) } }));
      await s.insertSandbox(record('sb_x', 'b'));
      const again = await open();
      const ids = async (f: Parameters<Store['listSandboxes']>[0]): Promise<string[]> => (await again.listSandboxes(f)).map((r) => r.id);
      assert.deepEqual(await ids({ tenant: 'a', limit: 10 }), ['sb_0', 'sb_1', 'sb_2', 'sb_3', 'sb_4']);
      assert.deepEqual(await ids({ tenant: 'a', limit: 2, after: 'sb_1' }), ['sb_2', 'sb_3']);
      assert.deepEqual(await ids({ tenant: 'a', limit: 10, state: 'stopped' }), ['sb_4']);
      assert.deepEqual(
        await ids({
          tenant: 'a',
          limit: 10,
          labels: [
            ['job', 'j'],
            ['n', '1'],
          ],
        }),
        ['sb_1', 'sb_3'],
      );
      assert.deepEqual(await ids({ tenant: 'b', limit: 10 }), ['sb_x']);
      // Newest first, before a cursor; in some states only.
      assert.deepEqual(await ids({ tenant: 'a', limit: 3, order: 'desc' }), ['sb_4', 'sb_3', 'sb_2']);
      assert.deepEqual(await ids({ tenant: 'a', limit: 10, order: 'desc', before: 'sb_2' }), ['sb_1', 'sb_0']);
      assert.deepEqual(await ids({ tenant: 'a', limit: 10, states: ['stopped', 'paused'] }), ['sb_4']);
      assert.deepEqual(await ids({ tenant: 'a', limit: 2, states: ['running'], order: 'desc', before: 'sb_4' }), ['sb_3', 'sb_2']);
    });
  });

  test(`${kind.name}: keys, pools and the audit log`, async () => {
    await withStore(kind, async (s) => {
      const hash = 'ab'.repeat(32);
      await s.putKey({ hash, tenant: 't', role: 'builder', quota: { sandboxes: 3 }, createdAt: 1_700_000_000_000 });
      assert.deepEqual(await s.getKey(hash), { hash, tenant: 't', role: 'builder', quota: { sandboxes: 3 }, createdAt: 1_700_000_000_000 });
      assert.equal(await s.deleteKeyByPrefix('cd'.repeat(8)), false);
      assert.equal(await s.deleteKeyByPrefix(hash.slice(0, 16)), true);
      assert.equal(await s.getKey(hash), undefined);
      const pool = {
        id: 'pl_1',
        tenant: 't',
        image: 'busybox:latest',
        layers: ['sha256:aa'],
        layerNames: [],
        resources: { cpu: 1, memoryMiB: 64, pids: 8, diskMiB: null },
        network: { egress: 'deny' as const, allow: [], deny: [] },
        size: 2,
        createdAt: 5,
      };
      await s.putPool(pool);
      await s.putPool({ ...pool, size: 3 });
      assert.deepEqual(await s.listPools(), [{ ...pool, size: 3 }]);
      await s.deletePool('pl_1');
      assert.deepEqual(await s.listPools(), []);
      const entry = (i: number, tenant: string | null, sandbox: string | null) => ({
        at: new Date(1_700_000_000_000 + i).toISOString(),
        keyId: 'k1',
        tenant,
        method: 'POST',
        path: `/v1/x/${i}`,
        sandbox,
        status: 200,
        code: null,
      });
      await s.appendAudit([entry(1, 't', 'sb_1'), entry(2, 'u', null)]);
      await s.appendAudit([entry(3, 't', null)]);
      await s.appendAudit([]);
      assert.deepEqual(
        (await s.listAudit({ limit: 10 })).map((e) => e.path),
        ['/v1/x/3', '/v1/x/2', '/v1/x/1'],
      );
      assert.deepEqual(await s.listAudit({ limit: 10, tenant: 't', sandbox: 'sb_1' }), [entry(1, 't', 'sb_1')]);
      assert.equal((await s.listAudit({ limit: 1, tenant: 't' }))[0]?.path, '/v1/x/3');
    });
  });

  test(`${kind.name}: leases: made, renewed only while active and before their deadline, lapsed once (one replica wins), deleted; a lease's sandboxes and their nodes`, async () => {
    await withStore(kind, async (s, open) => {
      const a = await s.leases.create({ id: 'ls_a', tenant: 't1', ttlSeconds: 60, onExpiry: 'pause', labels: { job: 'j' } });
      assert.equal(a.state, 'active');
      assert.ok(a.expiresAt - a.createdAt === 60_000, `${a.expiresAt - a.createdAt}`);
      const r = await s.leases.renew('ls_a', 't1', 120);
      assert.equal(r?.renewals, 1);
      assert.ok(r.expiresAt >= a.expiresAt + 59_000);
      // Another tenant's renewal finds nothing.
      assert.equal(await s.leases.renew('ls_a', 't2', 120), undefined);
      // Past its deadline: not renewed, and lapsed by exactly one of two replicas sweeping at once.
      const b = await s.leases.create({ id: 'ls_b', tenant: 't1', ttlSeconds: 1, onExpiry: 'delete', labels: {} });
      await s.insertSandboxes([record('sb_1', 't1', { lease: 'ls_b' }), record('sb_2', 't1', { lease: 'ls_b', node: 'n2' }), record('sb_3', 't1')]);
      assert.deepEqual((await s.leases.nodes('ls_b')).sort(), ['n1', 'n2']);
      assert.deepEqual(
        (await s.listSandboxes({ tenant: 't1', lease: 'ls_b', limit: 10 })).map((x) => x.id),
        ['sb_1', 'sb_2'],
      );
      const other = await open();
      try {
        for (;;) {
          const got = await s.leases.get('ls_b');
          if (got!.expiresAt <= Date.now()) break;
          await new Promise((res) => setTimeout(res, got!.expiresAt - Date.now() + 1));
        }
        assert.equal(await s.leases.renew('ls_b', 't1', 60), undefined);
        assert.deepEqual(await s.leases.orphans(10), [], 'an active lease has no orphans');
        const [x, y] = await Promise.all([s.leases.lapse(10), other.leases.lapse(10)]);
        assert.deepEqual(
          [...x, ...y].map((l) => [l.id, l.state]),
          [['ls_b', 'lapsed']],
        );
        assert.ok((await other.leases.get('ls_b'))!.endedAt! >= b.createdAt);
      } finally {
        await other.close();
      }
      // Lapsed where it says delete: its live sandboxes are orphans until ended.
      assert.deepEqual((await s.leases.orphans(10)).map((o) => o.id).sort(), ['sb_1', 'sb_2']);
      await s.endSandbox('sb_1', { state: 'stopped', error: null });
      assert.deepEqual(
        (await s.leases.orphans(10)).map((o) => [o.id, o.tenant, o.lease]),
        [['sb_2', 't1', 'ls_b']],
      );
      // A lease that says pause leaves none when it lapses; deleted, it does.
      await s.insertSandbox(record('sb_4', 't1', { lease: 'ls_a' }));
      assert.deepEqual(
        (await s.leases.orphans(10)).map((o) => o.id),
        ['sb_2'],
      );
      // Deleted: ended for good; a second delete answers it as it is.
      assert.equal((await s.leases.remove('ls_a', 't1'))?.state, 'deleted');
      assert.deepEqual((await s.leases.orphans(10)).map((o) => o.id).sort(), ['sb_2', 'sb_4']);
      assert.equal((await s.leases.remove('ls_a', 't1'))?.state, 'deleted');
      assert.equal(await s.leases.remove('ls_a', 't2'), undefined);
      assert.equal(await s.leases.renew('ls_a', 't1', 60), undefined);
      assert.deepEqual((await s.leases.list('t1')).map((l) => l.id).sort(), ['ls_a', 'ls_b']);
      assert.deepEqual(
        (await s.leases.list('t1', 'lapsed')).map((l) => l.id),
        ['ls_b'],
      );
    });
  });

  test(`${kind.name}: lifecycle events: appended by any store, read per tenant in order after a seq, the newest seq, pruned by age`, async () => {
    await withStore(kind, async (s, open) => {
      assert.equal(await s.events.last(), 0);
      const other = await open();
      try {
        await s.events.append([
          { tenant: 't1', type: 'created', data: { sandbox: 'sb_1' } },
          { tenant: 't2', type: 'created', data: { sandbox: 'sb_2' } },
        ]);
        await other.events.append([{ tenant: 't1', type: 'ended', data: { sandbox: 'sb_1', end: { reason: 'deleted' } } }]);
        const t1 = await other.events.after('t1', 0, 10);
        assert.deepEqual(
          t1.map((e) => [e.type, e.data.sandbox]),
          [
            ['created', 'sb_1'],
            ['ended', 'sb_1'],
          ],
        );
        assert.ok(t1[0]!.seq < t1[1]!.seq);
        assert.deepEqual(
          (await s.events.after('t1', t1[0]!.seq, 10)).map((e) => e.seq),
          [t1[1]!.seq],
        );
        assert.equal(await s.events.last(), t1[1]!.seq);
        // Every tenant's (a webhook's read), in order; the oldest kept.
        assert.deepEqual(
          (await other.events.after(null, 0, 10)).map((e) => [e.tenant, e.type]),
          [
            ['t1', 'created'],
            ['t2', 'created'],
            ['t1', 'ended'],
          ],
        );
        assert.equal(await s.events.first(), t1[0]!.seq);
        assert.equal(await s.events.prune(60_000), 0);
        assert.equal(await s.events.prune(-60_000), 3);
        assert.deepEqual(await s.events.after('t1', 0, 10), []);
      } finally {
        await other.close();
      }
    });
  });

  test(`${kind.name}: a webhook's cursor: begins where it is told, one holder at a time (another takes it once released or lapsed), moved only by its holder`, async () => {
    await withStore(kind, async (s, open) => {
      const other = await open();
      assert.equal(await s.webhooks.cursor('h'), null);
      assert.equal(await s.webhooks.claim('h', 'a', 60_000, 7), 7);
      assert.equal(await other.webhooks.claim('h', 'b', 60_000, 0), null);
      assert.equal(await s.webhooks.claim('h', 'a', 60_000, 0), 7, 'renewed; the start of a known hook is ignored');
      assert.equal(await other.webhooks.advance('h', 'b', 9, 60_000), false);
      assert.equal(await s.webhooks.advance('h', 'a', 9, 60_000), true);
      assert.equal(await other.webhooks.cursor('h'), 9);
      await s.webhooks.release('h', 'a');
      assert.equal(await other.webhooks.claim('h', 'b', 1, 0), 9);
      assert.equal(await s.webhooks.advance('h', 'a', 10, 60_000), false);
      // b's claim lapses (1 ms): a takes it back.
      await until(async () => (await s.webhooks.claim('h', 'a', 60_000, 0)) === 9);
      assert.equal(await s.webhooks.claim('other-hook', 'b', 60_000, 3), 3);
      // Claims at once from two stores: one wins.
      const both = await Promise.all([s.webhooks.claim('h2', 'a', 60_000, 1), other.webhooks.claim('h2', 'b', 60_000, 1)]);
      assert.equal(both.filter((c) => c === 1).length, 1);
    });
  });

  test(`${kind.name}: replicas say where they are; each finds the others seen lately, not itself`, async () => {
    await withStore(kind, async (s, open) => {
      const other = await open();
      await s.seeReplica('r_a', 'http://10.0.0.5:7070');
      await other.seeReplica('r_b', 'http://10.0.0.6:7070');
      assert.deepEqual(await s.liveReplicas(60_000, 'r_a'), [{ id: 'r_b', url: 'http://10.0.0.6:7070' }]);
      assert.deepEqual(await other.liveReplicas(60_000, 'r_b'), [{ id: 'r_a', url: 'http://10.0.0.5:7070' }]);
      // Moved: the latest address; none seen within a bound below zero.
      await other.seeReplica('r_b', 'http://10.0.0.7:7070');
      assert.deepEqual(await s.liveReplicas(60_000, 'r_a'), [{ id: 'r_b', url: 'http://10.0.0.7:7070' }]);
      assert.deepEqual(await s.liveReplicas(-1000, 'r_a'), []);
    });
  });

  test(`${kind.name}: nodes join, heartbeat by their boot, are marked down once when silent (one replica wins), and their live sandboxes fail`, async () => {
    await withStore(kind, async (s, open) => {
      const other = await open();
      const load = { sandboxes: 0 };
      await s.putNode({ id: 'n1', address: '127.0.0.1:1', token: 't1', tlsFingerprint: null, boot: 'b1', info: { nodeId: 'n1' }, load });
      await s.putNode({
        id: 'n2',
        address: '127.0.0.1:2',
        token: 't2',
        tlsFingerprint: 'AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:CD',
        boot: 'b2',
        info: { nodeId: 'n2' },
        load,
      });
      assert.deepEqual(
        (await s.listNodes()).map((n) => [n.id, n.state, n.address, n.tlsFingerprint]),
        [
          ['n1', 'joining', '127.0.0.1:1', null],
          ['n2', 'joining', '127.0.0.1:2', 'AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:CD'],
        ],
      );
      assert.equal(await s.setNodeState('n1', 'ready', { from: ['joining'] }), true);
      assert.equal(await s.setNodeState('n1', 'ready', { from: ['joining'] }), false);
      // A heartbeat of another boot (an edge that restarted and has not joined again) is refused.
      assert.deepEqual(
        await other.heartbeatNodes([
          { id: 'n1', boot: 'b0', load: { sandboxes: 9 } },
          { id: 'n1', boot: 'b1', load: { sandboxes: 2 } },
          { id: 'n9', boot: 'b1', load: { sandboxes: 1 } },
        ]),
        [false, true, false],
      );
      assert.deepEqual(await other.heartbeatNodes([]), []);
      const n1 = await s.getNode('n1');
      assert.deepEqual(n1?.load, { sandboxes: 2 });
      assert.equal(n1?.token, 't1');
      assert.ok(n1 && n1.silentMs < 60_000 && n1.joinedAt > 0 && n1.heartbeatAt >= n1.joinedAt);
      // Nobody has been silent for a minute; with a bound below zero every node is past it, and
      // of two replicas marking at once each node is marked by one.
      assert.deepEqual(await s.markNodesDown(60_000), []);
      await s.insertSandbox(record('sb_1', 'a', { node: 'n1' }));
      await s.insertSandbox(record('sb_2', 'a', { node: 'n1', state: 'paused' }));
      await s.insertSandbox(record('sb_3', 'a', { node: 'n1', state: 'stopped' }));
      await s.insertSandbox(record('sb_4', 'a', { node: 'n2' }));
      const [x, y] = await Promise.all([s.markNodesDown(-1000), other.markNodesDown(-1000)]);
      assert.deepEqual([...(x ?? []), ...(y ?? [])].sort(), ['n1', 'n2']);
      assert.equal((await s.getNode('n1'))?.state, 'down');
      assert.deepEqual(await s.heartbeatNodes([{ id: 'n1', boot: 'b1', load }]), [false]);
      const why = { code: 'unavailable', message: 'node n1 is down' };
      const end = { reason: 'node_lost' as const, detail: 'node n1 is down', at: 7 };
      assert.deepEqual((await s.failLiveOnNode('n1', why, end)).sort(), ['sb_1', 'sb_2']);
      assert.deepEqual(await s.failLiveOnNode('n1', why, end), []);
      assert.deepEqual((await s.getSandbox('sb_1'))?.end, end);
      assert.deepEqual((await s.getSandbox('sb_2'))?.error, why);
      assert.equal((await s.getSandbox('sb_2'))?.state, 'failed');
      assert.equal((await s.getSandbox('sb_3'))?.state, 'stopped');
      assert.equal((await s.getSandbox('sb_4'))?.state, 'running');
      // A create is stale by the store's clock, which recorded it, not by the record's own time
      // (a replica whose clock is behind wrote createdAt 100): none is a minute old yet; all are
      // older than a minute from now, oldest first.
      await s.insertSandbox(record('sb_5', 'a', { node: 'n2', state: 'creating', createdAt: 100 }));
      await s.insertSandbox(record('sb_6', 'a', { node: 'n2', state: 'creating', createdAt: 300 }));
      assert.deepEqual(await s.staleCreating(60_000, 10), []);
      assert.deepEqual(
        (await s.staleCreating(-60_000, 10)).map((r) => r.id),
        ['sb_5', 'sb_6'],
      );
      // A create that left `creating` by any way (marked running, failed, ended, its record
      // removed) is not stale; the others stay so, however often asked.
      for (const id of ['sb_7', 'sb_8', 'sb_9', 'sb_10']) await s.insertSandbox(record(id, 'a', { node: 'n2', state: 'creating' }));
      assert.deepEqual(await s.markStarted(['sb_7']), ['sb_7']);
      assert.equal(await s.updateSandbox('sb_8', { state: 'failed' }, { from: ['creating'] }), true);
      assert.equal((await s.endSandbox('sb_9', { state: 'stopped', error: null }))?.state, 'creating');
      await s.deleteSandbox('sb_10');
      for (let i = 0; i < 2; i++)
        assert.deepEqual(
          (await s.staleCreating(-60_000, 10)).map((r) => r.id),
          ['sb_5', 'sb_6'],
        );
      // Joining again brings it back (joining); a drained node stays drained through a rejoin.
      await s.putNode({ id: 'n1', address: '127.0.0.1:3', token: 't3', tlsFingerprint: null, boot: 'b3', info: {}, load });
      assert.equal((await s.getNode('n1'))?.state, 'joining');
      await s.setNodeState('n2', 'draining');
      await s.putNode({ id: 'n2', address: '127.0.0.1:2', token: 't2', tlsFingerprint: null, boot: 'b4', info: {}, load });
      assert.equal((await s.getNode('n2'))?.state, 'draining');
    });
  });
}

test('postgres: two ends of one sandbox at once (replicas): both read it live before either took it, one answers it live', async () => {
  const url = await (await (server ??= startTestPostgres())).createDatabase(`ends${process.pid}`);
  const [a, b] = [await PgStore.open(url, { max: 4 }), await PgStore.open(url, { max: 4 })];
  const lock = new pg.Client({ connectionString: url });
  await lock.connect();
  try {
    await a.insertSandbox(record('sb_1', 't'));
    // Its row held: both ends read it (live), then wait for the row.
    await lock.query('BEGIN');
    await lock.query("SELECT 1 FROM sandboxes WHERE id = 'sb_1' FOR UPDATE");
    const ends = Promise.all([a.endSandbox('sb_1', { state: 'stopped', error: null }), b.endSandbox('sb_1', { state: 'failed', error: null })]);
    // Both wait on the lock (pg_locks shows two waiting), then it goes.
    for (;;) {
      const r = await lock.query<{ n: string }>("SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')");
      if (Number(r.rows[0]!.n) >= 2) break;
      await new Promise((res) => setTimeout(res, 5));
    }
    await lock.query('COMMIT');
    assert.deepEqual((await ends).map((e) => e?.state === 'running').filter(Boolean).length, 1);
  } finally {
    await lock.end();
    await a.close();
    await b.close();
  }
});

test('postgres: a database that restarts: calls while it is down answer unavailable, and the store works again after without being reopened', async () => {
  const own = await startTestPostgres();
  const store = await PgStore.open(await own.createDatabase('restart'), { max: 4 });
  try {
    await store.insertSandbox(record('sb_1', 'a'));
    const restarted = own.restart({ downMs: 300 });
    // While it is down (or shutting down): a clear error, not a driver's.
    await new Promise((r) => setTimeout(r, 100));
    await assert.rejects(store.getSandbox('sb_1'), (e: WarrenError) => e.code === 'unavailable' && /database is not answering/.test(e.message));
    await assert.rejects(store.insertSandbox(record('sb_2', 'a'), { admit: atMost(9) }), (e: WarrenError) => e.code === 'unavailable');
    await restarted;
    assert.equal((await store.getSandbox('sb_1'))?.id, 'sb_1');
    await store.insertSandbox(record('sb_3', 'a'), { admit: atMost(9) });
    assert.deepEqual(await store.tenantUsage('a'), { sandboxes: 2, cpu: 1, memoryMiB: 256 });
  } finally {
    await store.close();
    await own.stop();
  }
});

test('postgres: a create marked running is a HOT update (no index names the state); the creates in flight are listed, also those of a database made before the list', async () => {
  const url = await (await (server ??= startTestPostgres())).createDatabase(`hot${process.pid}`);
  const ids = Array.from({ length: 40 }, (_, i) => `sb_${i}`);
  let store = await PgStore.open(url, { max: 2 });
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    // One group of creates, as the group writes send them: each row's new version fits its page.
    await store.insertSandboxes(ids.map((id) => record(id, 't', { state: 'creating' })));
    assert.deepEqual((await store.markStarted(ids)).sort(), [...ids].sort());
    assert.equal((await store.endSandbox('sb_0', { state: 'stopped', error: null }))?.state, 'running');
    await store.close();
    // A backend's counts reach pg_stat_user_tables when it ends.
    const counts = async (): Promise<{ upd: number; hot: number }> => {
      const r = await c.query<{ upd: string; hot: string }>(
        `SELECT n_tup_upd AS upd, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relname = 'sandboxes'`,
      );
      return { upd: Number(r.rows[0]?.upd), hot: Number(r.rows[0]?.hot) };
    };
    await until(async () => (await counts()).upd >= 41);
    // The marks HOT; the end not (it changes `live`, which an index names).
    assert.deepEqual(await counts(), { upd: 41, hot: 40 });
    assert.equal(Number((await c.query<{ n: string }>('SELECT count(*) AS n FROM sandbox_creates')).rows[0]?.n), 0);
    // A database as it was before the list: its creates in flight are found once it is opened.
    await c.query(`INSERT INTO sandboxes (id, tenant, node, state, created_at, doc) VALUES ('sb_old', 't', 'n1', 'creating', 1, $1)`, [
      JSON.stringify(record('sb_old', 't', { state: 'creating' })),
    ]);
    await c.query(`DROP INDEX sandboxes_live_on_node; ALTER TABLE sandboxes DROP COLUMN live; ALTER TABLE sandboxes RESET (fillfactor);
      CREATE INDEX sandboxes_state ON sandboxes (state, created_at); CREATE INDEX sandboxes_node ON sandboxes (node, state)`);
    store = await PgStore.open(url, { max: 2 });
    assert.deepEqual(
      (await store.staleCreating(60_000, 10)).map((r) => r.id),
      ['sb_old'],
    );
    assert.deepEqual((await store.liveOnNode('n1')).map((r) => r.id).sort(), ['sb_old', ...ids.slice(1)].sort());
    const schema = await c.query<{ opts: string[] | null; old: string | null }>(
      `SELECT reloptions AS opts, coalesce(to_regclass('sandboxes_state'), to_regclass('sandboxes_node'))::text AS old FROM pg_class WHERE relname = 'sandboxes'`,
    );
    assert.deepEqual(schema.rows[0], { opts: ['fillfactor=50'], old: null });
  } finally {
    await c.end();
    await store.close().catch(() => undefined);
  }
});
