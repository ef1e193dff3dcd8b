// run-tests: alone, a lease's sandboxes end within a second of its deadline.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { OWNER_PID_FILE } from '@warren/edge';
import { startServer, type RunningServer } from '@warren/server';
import { Warren } from '@warren/sdk';
import { type EdgeProcess, forceCleanup, hostLeftovers, IMAGE_CACHE, ownedTempDir, spawnEdge, until } from './harness.js';

// The RL loop's parts over two real nodes: a control plane in this process (its state in SQLite:
// one replica) and two `warren edge` processes joined to it, each holding at most 3 sandboxes. A
// driver that holds a lease and is killed with -9 leaves none of its sandboxes, on either node,
// past the lease's TTL and a second; a fork whose source's node is full goes on to the other
// node, its fork base travelling as a layer; a commit made on one node runs on the other. The
// edge protocol is always spoken here, so the suite's other passes have nothing to add: it runs once.
const rerun = process.env.WARREN_EDGE_TRANSPORT === 'http' || process.env.WARREN_TEST_STORE === 'postgres';

const TOKEN = 'lease-cluster-join-token-0123456789';
const KEY = 'lease-cluster-admin-key';
const SDK = new URL('../../packages/sdk/dist/index.js', import.meta.url).href;
const quiet = { info: () => undefined, warn: (m: string, meta?: unknown) => process.env.WARREN_TEST_LOG && console.error(m, meta) };

const dirs: string[] = [];
const edges: EdgeProcess[] = [];
let server: RunningServer | undefined;
let client: Warren;

async function dataDir(): Promise<string> {
  const d = await ownedTempDir('lease-cluster-');
  // The test runner's sweep for leftovers leaves it alone while this process lives.
  await writeFile(join(d, OWNER_PID_FILE), `${process.pid}\n`);
  dirs.push(d);
  return d;
}

before(async () => {
  if (rerun) return;
  server = await startServer({
    port: 0,
    host: '127.0.0.1',
    dataDir: await dataDir(),
    imageCacheDir: IMAGE_CACHE,
    images: ['busybox:latest'],
    adminKey: KEY,
    joinToken: TOKEN,
    heartbeatMs: 200,
    downAfterMs: 1500,
    logger: quiet,
  });
  client = new Warren({ url: server.url, apiKey: KEY });
  edges.push(...(await Promise.all(['a', 'b'].map(async (n) => spawnEdge(server!.url, n, await dataDir(), TOKEN, ['--max-sandboxes', '3'])))));
});

after(async () => {
  for (const e of edges) await e.kill('SIGKILL').catch(() => undefined);
  await server?.close().catch(() => undefined);
  for (const d of dirs) await forceCleanup(d).catch(() => undefined);
});

test(
  'a driver killed with -9: its sandboxes on both nodes end as lease within the TTL and a second, and nothing of them is left on either',
  { skip: rerun ? 'it runs once (it always speaks the edge protocol)' : false },
  async () => {
    // The driver: takes a 2 s lease (renewed in the background), makes sandboxes with it until
    // both nodes hold some, says so, and waits.
    const script = `
      const { Warren } = await import(${JSON.stringify(SDK)});
      const w = new Warren({ url: process.env.WARREN_URL, apiKey: process.env.WARREN_API_KEY });
      const lease = await w.leases.create({ ttlSeconds: 2 });
      const make = () => w.sandboxes.create({ image: 'busybox:latest', lease: lease.id });
      const made = await Promise.all([make(), make(), make(), make()]);
      while (new Set(made.map((s) => s.info.node)).size < 2 && made.length < 12) made.push(await make());
      console.log(JSON.stringify({ lease: lease.id, sandboxes: made.map((s) => ({ id: s.id, node: s.info.node })) }));
      setInterval(() => undefined, 1 << 30);
    `;
    const driver = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, WARREN_URL: server!.url, WARREN_API_KEY: KEY },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    after(() => void driver.kill('SIGKILL'));
    const [line] = (await once(driver.stdout, 'data')) as [Buffer];
    const made = JSON.parse(line.toString()) as { lease: string; sandboxes: Array<{ id: string; node: string }> };
    assert.deepEqual([...new Set(made.sandboxes.map((s) => s.node))].sort(), ['a', 'b']);
    const ids = made.sandboxes.map((s) => s.id);
    // Renewed by the driver: past the first deadline they still run.
    const firstDeadline = Date.parse((await client.leases.get(made.lease)).info.expiresAt);
    await until(async () => (await client.leases.get(made.lease)).info.renewals >= 2 && Date.now() > firstDeadline + 500, 10_000);
    const states = async (): Promise<string[]> => Promise.all(ids.map(async (id) => (await client.sandboxes.get(id)).info.state));
    assert.deepEqual(new Set(await states()), new Set(['running']));
    // Each is on this host (the nodes are): what is looked for below is there now.
    for (const id of ids) assert.notDeepEqual(hostLeftovers(id), [], id);

    driver.kill('SIGKILL');
    await once(driver, 'exit');
    const deadline = Date.parse((await client.leases.get(made.lease)).info.expiresAt);
    await until(async () => (await states()).every((s) => s === 'stopped'), 10_000);
    for (const id of ids) {
      const end = (await client.sandboxes.get(id)).info.end;
      assert.equal(end?.reason, 'lease', id);
      const lateMs = Date.parse(end.at) - deadline;
      assert.ok(lateMs >= 0 && lateMs <= 1000, `${id} ended ${lateMs} ms after its lease's deadline`);
    }
    assert.equal((await client.leases.get(made.lease)).info.state, 'lapsed');
    // Gone from both nodes' hosts too: no init, no cgroup, no runc container.
    await until(async () => ids.every((id) => hostLeftovers(id).length === 0), 5000);
    const goneMs = Date.now() - deadline;
    assert.ok(goneMs <= 1000 + 500, `what was left of them was gone ${goneMs} ms after the deadline (a second and the polling's)`);
  },
);

test(
  'a fork ×4 whose source’s node holds 2 more: 2 children there, 2 on the other node standing on its base as a layer; with that node full, a fork goes elsewhere whole; a commit made on one node runs on the other',
  { skip: rerun ? 'it runs once (it always speaks the edge protocol)' : false },
  async () => {
    const src = await client.sandboxes.create({ image: 'busybox:latest' });
    const made = [src];
    try {
      const r0 = await src.exec('echo from-the-source > /f && mkdir -p /d && echo deep > /d/e');
      assert.equal(r0.exitCode, 0);
      const r = await src.fork({ count: 4 });
      made.push(...r.sandboxes);
      assert.deepEqual(r.errors, []);
      const nodes = r.sandboxes.map((c) => c.info.node);
      assert.deepEqual([nodes.filter((n) => n === src.info.node).length, nodes.filter((n) => n !== src.info.node).length], [2, 2]);
      for (const c of r.sandboxes) assert.equal((await c.exec('cat /f /d/e')).stdout, 'from-the-source\ndeep\n', c.info.node);
      // Its node full now: a fork none of whose children fits there goes elsewhere whole (its
      // base made a layer before the node let it go).
      const r2 = await src.fork({ count: 1 });
      made.push(...r2.sandboxes);
      assert.deepEqual(r2.errors, []);
      assert.notEqual(r2.sandboxes[0]?.info.node, src.info.node);
      assert.equal((await r2.sandboxes[0]!.exec('cat /f')).stdout, 'from-the-source\n');
      await Promise.all([...r.sandboxes, ...r2.sandboxes].map((c) => c.delete()));
      made.splice(1);
      // A commit of the source, on its node: the image's layer reached the control plane's blobs,
      // so a sandbox of it on the other node has its files.
      const img = await src.commit('rl-cluster/committed:v1');
      const more = await client.sandboxes.createMany(4, { image: img.name });
      made.push(...more.sandboxes);
      const elsewhere = more.sandboxes.filter((s) => s.info.node !== src.info.node);
      assert.ok(elsewhere.length > 0, JSON.stringify(more.sandboxes.map((s) => s.info.node)));
      for (const s of elsewhere) assert.equal((await s.exec('cat /f')).stdout, 'from-the-source\n');
    } finally {
      await Promise.all(made.map((s) => s.delete().catch(() => undefined)));
    }
  },
);
