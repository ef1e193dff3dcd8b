import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import { SqliteStore } from './sqlite-store.js';
import type { SandboxRecord, TenantUsage } from './store.js';

const record = (id: string, tenant: string, more: Partial<SandboxRecord> = {}): SandboxRecord => ({
  id,
  tenant,
  node: 'n1',
  state: 'running',
  backend: 'container',
  image: 'busybox:latest',
  layers: [],
  layerNames: [],
  labels: { job: 'j1' },
  resources: { cpu: 0.5, memoryMiB: 128, pids: 64, diskMiB: null },
  env: {},
  user: null,
  workdir: null,
  createdAt: 1,
  expiresAt: null,
  lastActivityAt: 1,
  idleTimeoutSeconds: null,
  error: null,
  requestId: null,
  ...more,
});

async function withStore(fn: (s: SqliteStore, file: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-store-'));
  const s = new SqliteStore(join(dir, 'warren.db'));
  try {
    await fn(s, join(dir, 'warren.db'));
  } finally {
    await s.close();
    await rm(dir, { recursive: true, force: true });
  }
}

/** A quota of `max` sandboxes, checked as SandboxService checks it. */
const atMost =
  (max: number) =>
  (u: TenantUsage): void => {
    if (u.sandboxes + 1 > max) throw new WarrenError('resource_exhausted', 'over quota');
  };

test("an insert's quota check sees the tenant's live sandboxes only, and a refused insert records nothing (labels neither)", async () => {
  await withStore(async (s) => {
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
  });
});

test('inserts through two connections to one file cannot pass a quota together', async () => {
  await withStore(async (s, file) => {
    const other = new SqliteStore(file);
    try {
      // Each connection's insert reads the usage inside its own write transaction: the second
      // sees the first's row, whichever runs first.
      const results = await Promise.allSettled([
        s.insertSandbox(record('sb_a', 't'), { admit: atMost(1) }),
        other.insertSandbox(record('sb_b', 't'), { admit: atMost(1) }),
      ]);
      assert.deepEqual(
        results.map((r) => r.status),
        ['fulfilled', 'rejected'],
      );
      assert.equal((await other.tenantUsage('t')).sandboxes, 1);
    } finally {
      await other.close();
    }
  });
});

test('a patch changes only what it names; a requestId finds its sandbox; an exec requestId has one first writer', async () => {
  await withStore(async (s) => {
    await s.insertSandbox(record('sb_1', 'a', { requestId: 'r1' }));
    await s.updateSandbox('sb_1', { state: 'paused', expiresAt: 99 });
    await s.updateSandbox('sb_missing', { state: 'stopped' });
    const got = await s.getSandbox('sb_1');
    assert.equal(got?.state, 'paused');
    assert.equal(got?.expiresAt, 99);
    assert.equal(got?.lastActivityAt, 1);
    assert.equal((await s.findByRequestId('a', 'r1'))?.id, 'sb_1');
    assert.equal(await s.findByRequestId('b', 'r1'), undefined);
    assert.deepEqual(
      (await s.liveOnNode('n1')).map((r) => r.id),
      ['sb_1'],
    );
    assert.equal(await s.putExecRequest('sb_1', 'x', 'c1'), true);
    assert.equal(await s.putExecRequest('sb_1', 'x', 'c2'), false);
    assert.equal(await s.execRequest('sb_1', 'x'), 'c1');
    await s.deleteExecRequests('sb_1');
    assert.equal(await s.execRequest('sb_1', 'x'), undefined);
  });
});
