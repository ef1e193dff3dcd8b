import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OWNER_PID_FILE, nodeTag, startSimulatedEdge, type RunningEdge } from '@warren/edge';
import { startServer, startTestPostgres, type RunningServer, type TestPostgres } from '@warren/server';
import { Warren } from '@warren/sdk';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect as tlsConnect } from 'node:tls';
import { makeTar } from './tar-writer.js';
import { fakeEdge, textServer, upgradeStatus } from './cluster-fakes.js';
import { CLI, IMAGE_CACHE, forceCleanup, hostLeftovers, initOf, spawnEdge, until, type EdgeProcess } from './harness.js';

// Several nodes on this machine: a control plane (in this process, its state in PostgreSQL) and
// edges as processes of their own (`warren edge --join`), each with its own data dir, killed,
// stopped and started again. The cluster always speaks the edge protocol and keeps its state in
// PostgreSQL, so the suite's other passes (transport, store) have nothing to add: it runs once.
const rerun = process.env.WARREN_EDGE_TRANSPORT === 'http' || process.env.WARREN_TEST_STORE === 'postgres';

const TOKEN = 'join-token-for-tests-0123456789';
const KEY = 'cluster-admin-key';
const quiet = { info: () => undefined, warn: (m: string, meta?: unknown) => process.env.WARREN_TEST_LOG && console.error(m, meta) };

let pg: TestPostgres;
let dbs = 0;
const dirs: string[] = [];
const edges: EdgeProcess[] = [];
const servers: RunningServer[] = [];

async function dataDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'warren-cluster-'));
  // The test runner's sweep for leftovers leaves it alone while this process lives.
  await writeFile(join(d, OWNER_PID_FILE), `${process.pid}\n`);
  dirs.push(d);
  return d;
}

/** A control plane on `database` (a new one unless given): quick heartbeats, a short down delay. */
async function server(
  o: {
    database?: string;
    heartbeatMs?: number;
    downAfterMs?: number;
    staleCreateMs?: number;
    logger?: typeof quiet;
    edgeNetworks?: string[];
    requireEdgeTls?: boolean;
    images?: Array<'busybox:latest' | 'debian-python:latest'>;
    fn?: Parameters<typeof startServer>[0]['fn'];
  } = {},
): Promise<{ s: RunningServer; client: Warren; database: string }> {
  const database = o.database ?? (await pg.createDatabase(`cluster${++dbs}`));
  const s = await startServer({
    port: 0,
    host: '127.0.0.1',
    dataDir: await dataDir(),
    database,
    imageCacheDir: IMAGE_CACHE,
    images: o.images ?? ['busybox:latest'],
    adminKey: KEY,
    joinToken: TOKEN,
    fn: o.fn,
    heartbeatMs: o.heartbeatMs ?? 200,
    downAfterMs: o.downAfterMs ?? 1500,
    staleCreateMs: o.staleCreateMs,
    edgeNetworks: o.edgeNetworks,
    requireEdgeTls: o.requireEdgeTls,
    logger: o.logger ?? quiet,
  });
  servers.push(s);
  return { s, client: new Warren({ url: s.url, apiKey: KEY }), database };
}

/** `warren server` as a process of its own (one a test can kill), on `database`; answers its URL and exit. */
async function serverProcess(database: string, env: Record<string, string> = {}): Promise<{ url: string; exited: Promise<number | null> }> {
  const child = spawn(
    process.execPath,
    [CLI, 'server', '--port', '0', '--data-dir', await dataDir(), '--database', database, '--images', 'busybox:latest', '--image-cache', IMAGE_CACHE],
    { env: { ...process.env, WARREN_JOIN_TOKEN: TOKEN, WARREN_API_KEY: KEY, ...env }, stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  after(() => void child.kill('SIGKILL'));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /running at (http:\/\/\S+)/.exec(out);
      if (m?.[1]) resolve(m[1]);
    });
    child.on('exit', () => reject(new Error(`warren server exited early: ${out}`)));
  });
  return { url, exited };
}

async function edge(url: string, name: string, args: string[] = [], dir?: string, env: Record<string, string> = {}): Promise<EdgeProcess> {
  const e = await spawnEdge(url, name, dir ?? (await dataDir()), TOKEN, args, env);
  edges.push(e);
  return e;
}

async function api(
  url: string,
  method: string,
  path: string,
  body?: unknown,
  key = KEY,
): Promise<{ status: number; json: { error?: { code: string; message: string } } & Record<string, unknown> }> {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: (text ? JSON.parse(text) : {}) as Awaited<ReturnType<typeof api>>['json'] };
}

const nodeStates = async (c: Warren): Promise<Record<string, string>> => Object.fromEntries((await c.nodes()).nodes.map((n) => [n.id, n.state]));

describe(
  'a cluster: warren server and edges that join it',
  { skip: rerun ? 'the cluster runs once (it always speaks the edge protocol, on PostgreSQL)' : false },
  () => {
    before(async () => {
      pg = await startTestPostgres();
    });
    after(async () => {
      for (const e of edges) await e.kill('SIGKILL').catch(() => undefined);
      for (const s of servers) await s.close().catch(() => undefined);
      for (const d of dirs) await forceCleanup(d).catch(() => undefined);
      await pg?.stop();
    });

    test('edges join; creates spread over them; every call reaches the sandbox on its node; bad joins are refused', async () => {
      const warnings: Array<{ msg: string; meta: unknown }> = [];
      const { s, client } = await server({
        logger: { info: () => undefined, warn: (msg, meta) => void warnings.push({ msg, meta }) },
        edgeNetworks: ['127.0.0.1/32'],
      });
      const aDir = await dataDir();
      // Node b speaks its edge protocol over TLS: everything below reaches it that way.
      const [a, b] = await Promise.all([edge(s.url, 'a', [], aDir), edge(s.url, 'b', ['--tls'])]);
      // The cluster's own hosts (replicas, nodes, the database: all on 127.0.0.1 here) are in the
      // node's always-deny set from its join on.
      assert.match(execFileSync('nft', ['list', 'set', 'inet', `warren_${nodeTag(aDir)}`, 'always_deny']).toString(), /elements = \{ 127\.0\.0\.1/);
      assert.deepEqual(await nodeStates(client), { a: 'ready', b: 'ready' });
      const listed = (await client.nodes()).nodes;
      assert.deepEqual(
        listed.map((n) => [n.id, n.backends]),
        [
          ['a', ['container', 'microvm', 'vm']],
          ['b', ['container', 'microvm', 'vm']],
        ],
      );
      assert.deepEqual(listed.map((n) => n.address).sort(), [a.address, b.address].sort());
      // b's certificate is the one its join gave, which the control plane pinned; a is plain TCP.
      const [bHost, bPort] = [b.address.slice(0, b.address.lastIndexOf(':')), Number(b.address.slice(b.address.lastIndexOf(':') + 1))];
      const tlsToB = tlsConnect({ host: bHost, port: bPort, rejectUnauthorized: false });
      await once(tlsToB, 'secureConnect');
      assert.deepEqual(
        listed.map((n) => [n.id, n.tlsFingerprint]),
        [
          ['a', null],
          ['b', tlsToB.getPeerCertificate().fingerprint256],
        ],
      );
      tlsToB.destroy();

      const made = await Promise.all(Array.from({ length: 8 }, (_, i) => client.sandboxes.create({ image: 'busybox:latest', labels: { i: String(i) } })));
      const on = (n: string): number => made.filter((x) => x.info.node === n).length;
      assert.ok(on('a') >= 2 && on('b') >= 2, `spread: a ${on('a')}, b ${on('b')}`);
      for (const sb of made) {
        assert.equal((await sb.exec(`hostname; echo ${sb.id} > /tmp/me; cat /tmp/me`)).stdout, `${sb.id.replace('_', '-')}\n${sb.id}\n`);
        await sb.files.write('/tmp/f', `on ${sb.info.node}`);
        assert.equal(await sb.files.readText('/tmp/f'), `on ${sb.info.node}`);
      }
      const sh = await made[0]!.shell();
      await sh.exec('export X=42');
      assert.equal((await sh.exec('echo $X')).stdout, '42\n');
      await made[1]!.pause();
      assert.equal((await client.sandboxes.get(made[1]!.id)).info.state, 'paused');
      assert.equal((await made[1]!.exec('echo back')).stdout, 'back\n');
      assert.equal((await client.sandboxes.list({ labels: { i: '3' } })).sandboxes[0]?.id, made[3]!.id);
      await Promise.all(made.map((sb) => sb.delete()));
      for (const sb of made) assert.deepEqual(hostLeftovers(sb.id), []);
      assert.equal((await client.sandboxes.list({ state: 'running' })).sandboxes.length, 0);

      // A lease over both nodes: a renewal reaches each (past the first deadline they run on);
      // no longer renewed, its sandboxes on both are gone within its TTL and a second.
      const lease = await client.leases.create({ ttlSeconds: 60 }, { keepAlive: false });
      const leased = await Promise.all(Array.from({ length: 4 }, () => client.sandboxes.create({ image: 'busybox:latest', lease: lease.id })));
      assert.deepEqual([...new Set(leased.map((x) => x.info.node))].sort(), ['a', 'b']);
      const first = Date.parse((await lease.renew(2)).expiresAt);
      const deadline = Date.parse((await lease.renew(4)).expiresAt);
      await until(async () => Date.now() > first + 500, 5000);
      for (const sb of leased) assert.equal((await client.sandboxes.get(sb.id)).info.state, 'running');
      await until(async () => (await Promise.all(leased.map((sb) => client.sandboxes.get(sb.id)))).every((x) => x.info.state === 'stopped'), 10_000);
      assert.ok(Date.now() - deadline <= 1500, `the lease's sandboxes ended ${Date.now() - deadline} ms after its deadline`);
      for (const sb of leased) assert.deepEqual(hostLeftovers(sb.id), []);

      // A wrong join token is refused, and the edge says so and stops; an API key cannot join; the
      // join token is not an API key; a name a live edge holds is refused.
      await assert.rejects(spawnEdge(s.url, 'c', await dataDir(), 'wrong-token-0123456789'), /unauthenticated: unknown API key/);
      const join = { name: 'c', address: '127.0.0.1:1', token: 'x'.repeat(24), boot: 'b' };
      assert.equal((await api(s.url, 'POST', '/v1/nodes/join', join)).json.error?.code, 'permission_denied');
      assert.equal((await api(s.url, 'POST', '/v1/sandboxes', { image: 'busybox:latest' }, TOKEN)).json.error?.code, 'permission_denied');
      assert.equal((await api(s.url, 'POST', '/v1/nodes/join', { ...join, name: 'a' }, TOKEN)).json.error?.code, 'conflict');
      assert.equal((await api(s.url, 'POST', '/v1/nodes/join', { ...join, name: 'Bad_Name' }, TOKEN)).json.error?.code, 'invalid_argument');
      // One that gives an address nothing answers at is refused, and not recorded.
      const nowhere = await api(s.url, 'POST', '/v1/nodes/join', join, TOKEN);
      assert.equal(nowhere.json.error?.code, 'unavailable');
      assert.deepEqual(Object.keys(await nodeStates(client)), ['a', 'b']);
      // An address outside the edge networks (127.0.0.1 only, here) is refused before anything is
      // dialled, with the same answer whether something listens there or not (a listener that
      // the test reaches first); inside them, what the other end says is never echoed.
      const outside = await textServer('listening', { host: '127.0.0.2' });
      const banner = await textServer('{"error":{"code":"internal","message":"SECRET-BANNER"}}', { status: 500 });
      try {
        assert.equal(await (await fetch(`http://127.0.0.2:${outside.port}/`)).text(), 'listening');
        const answers = await Promise.all(
          [`127.0.0.2:${outside.port}`, `127.0.0.3:${outside.port}`, `169.254.169.254:80`].map(async (address) => {
            const r = (await api(s.url, 'POST', '/v1/nodes/join', { ...join, address }, TOKEN)).json.error;
            return `${r?.code} ${r?.message.replace(address, 'ADDRESS')}`;
          }),
        );
        assert.match(answers[0]!, /^permission_denied .*outside the networks edges may join from/);
        assert.deepEqual(new Set(answers).size, 1, answers.join('\n'));
        assert.equal(outside.connections(), 1);
        const echoed = (await api(s.url, 'POST', '/v1/nodes/join', { ...join, address: `127.0.0.1:${banner.port}` }, TOKEN)).json.error;
        assert.equal(echoed?.code, 'unavailable');
        assert.equal(banner.connections(), 1);
        assert.doesNotMatch(echoed?.message ?? '', /SECRET/);
      } finally {
        outside.close();
        banner.close();
      }
      // A layer uploaded through the control plane is in the cluster's blob store (the server's
      // own, handed to the edges when they joined): each node reads it on demand.
      const up = await fetch(`${s.url}/v1/layers?name=ws/task`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}` },
        body: makeTar([{ path: 'task/README', content: 'from the blob store\n' }]),
      });
      assert.equal(up.status, 201);
      const withLayer = await Promise.all([0, 1, 2, 3].map(() => client.sandboxes.create({ image: 'busybox:latest', layers: ['ws/task'] })));
      assert.deepEqual([...new Set(withLayer.map((x) => x.info.node))].sort(), ['a', 'b']);
      for (const x of withLayer) assert.equal((await x.exec('cat /task/README')).stdout, 'from the blob store\n');
      // Usage per node and per tenant in /metrics.
      const metrics = await (await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
      assert.match(metrics, /^warren_node_sandboxes\{node="a"\} \d+$/m);
      assert.match(metrics, /^warren_node_sandboxes\{node="b"\} \d+$/m);
      assert.match(metrics, /^warren_nodes\{state="ready"\} 2$/m);
      assert.match(metrics, /^warren_tenant_sandboxes\{tenant="default"\} 4$/m);
      // Ports go through the sandbox's node: its edge dials the port on its own host and the
      // bytes come back over the edge protocol (the replica dials no node's addresses).
      const web = withLayer[0]!;
      void web
        .exec(['sh', '-c', `mkdir -p /www && echo "from ${web.id}" > /www/who && exec busybox httpd -f -p 8080 -h /www`], { timeoutMs: 120_000 })
        .catch(() => undefined);
      const viaPort = (): Promise<Response> => fetch(`${s.url}/v1/sandboxes/${web.id}/ports/8080/who`, { headers: { authorization: `Bearer ${KEY}` } });
      await until(async () => (await viaPort()).status === 200, 10_000);
      assert.equal(await (await viaPort()).text(), `from ${web.id}\n`);
      // The join token is an edge's on every surface, not only the API's routes: E2B, run_code
      // (either form), the terminal and ports answer it permission_denied (an admin key, the
      // positive control, is served on each).
      const live = withLayer[0]!.id;
      const e2b = (key: string): Promise<Response> =>
        fetch(`${s.url}/e2b/sandboxes`, {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'application/json' },
          body: '{"templateID":"busybox:latest"}',
        });
      const runCode = (path: string, key?: string): Promise<Response> =>
        fetch(s.url + path, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
          body: JSON.stringify({ code: 'echo hi', language: 'bash' }),
        });
      const refused = async (r: Response): Promise<void> => {
        assert.equal(r.status, 403);
        assert.match(await r.text(), /join token serves edges only/);
      };
      await refused(await e2b(TOKEN));
      await refused(await runCode('/run_code', TOKEN));
      await refused(await runCode(`/sandboxfusion/${TOKEN}/run_code`));
      await refused(await fetch(`${s.url}/v1/sandboxes/${live}/ports/8080/`, { headers: { authorization: `Bearer ${TOKEN}` } }));
      assert.equal(await upgradeStatus(s.url, `/v1/sandboxes/${live}/pty`, { authorization: `Bearer ${TOKEN}` }), 403);
      assert.equal(await upgradeStatus(s.url, `/v1/sandboxes/${live}/ports/8080/`, { authorization: `Bearer ${TOKEN}` }), 403);
      // The nodes (addresses, capacity, every tenant's load) are an admin's to list.
      const user = (await api(s.url, 'POST', '/v1/keys', { tenant: 'someone' })).json.key as string;
      assert.equal((await api(s.url, 'GET', '/v1/nodes', undefined, user)).json.error?.code, 'permission_denied');
      assert.equal((await api(s.url, 'GET', '/v1/nodes', undefined, TOKEN)).json.error?.code, 'permission_denied');
      const made2b = await e2b(KEY);
      assert.equal(made2b.status, 201);
      await client.sandboxes.get(((await made2b.json()) as { sandboxID: string }).sandboxID).then((x) => x.delete());
      assert.notEqual((await runCode('/run_code', KEY)).status, 403);
      assert.equal(await upgradeStatus(s.url, `/v1/sandboxes/${live}/pty`, { authorization: `Bearer ${KEY}` }), 101);
      // A node speaks for its own sandboxes only: a fake edge joined with the join token that
      // says another node's sandbox expired, changed or died is ignored, and that is logged.
      // And a sandbox on it has its ports reached through it: the replica never dials the
      // address a node names (127.0.0.1 here, where an internal service listens).
      const victim = withLayer[1]!;
      const internal = await textServer('internal service');
      const nodeSide = await textServer('from the node');
      const fake = await fakeEdge(
        'evil',
        [
          { seq: 1, type: 'expired', id: victim.id, reason: 'ttl' },
          { seq: 2, type: 'state', id: victim.id, paused: true, expiresAtMs: 1 },
          { seq: 3, type: 'died', id: victim.id },
        ],
        nodeSide.port,
      );
      try {
        const joined = (await api(s.url, 'POST', '/v1/nodes/join', fake.join, TOKEN)).json;
        assert.equal(joined.node, 'evil');
        assert.deepEqual(joined.clusterHosts, ['127.0.0.1']);
        const ignored = (): number => warnings.filter((w) => /not on that node was ignored/.test(w.msg)).length;
        await until(async () => ignored() === 3 || (await client.sandboxes.get(victim.id)).info.state !== 'running');
        const after = (await client.sandboxes.get(victim.id)).info;
        assert.equal(after.state, 'running');
        assert.notEqual(after.expiresAt, new Date(1).toISOString());
        assert.equal((await victim.exec('echo alive')).stdout, 'alive\n');
        assert.equal(ignored(), 3);

        for (const n of ['a', 'b']) await api(s.url, 'POST', `/v1/nodes/${n}/drain`);
        const onFake = await client.sandboxes.create({ image: 'busybox:latest' });
        for (const n of ['a', 'b']) await api(s.url, 'POST', `/v1/nodes/${n}/ready`);
        assert.equal(onFake.info.node, 'evil');
        const r = await fetch(`${s.url}/v1/sandboxes/${onFake.id}/ports/${internal.port}/`, { headers: { authorization: `Bearer ${KEY}` } });
        assert.equal(await r.text(), 'from the node');
        assert.equal(internal.connections(), 0);
        assert.equal(nodeSide.connections(), 1);
        await onFake.delete();
      } finally {
        await fake.close();
        internal.close();
        nodeSide.close();
      }
      await Promise.all(withLayer.map((x) => x.delete()));
      // Heartbeats are not audited (one a second from every node).
      const audit = (await api(s.url, 'GET', '/v1/audit?limit=10000')).json.entries as Array<{ path: string }>;
      assert.equal(audit.filter((e) => e.path.endsWith('/heartbeat')).length, 0);
    });

    test('FnCall and run_code across two edges: each keeps its own warm workers, calls spread, a node killed mid-call', { timeout: 240_000 }, async () => {
      const { s, client, database } = await server({
        images: ['busybox:latest', 'debian-python:latest'],
        fn: { pools: [{ image: 'debian-python:latest', language: 'python', size: 1 }] },
      });
      const dirOf = { a: await dataDir(), b: await dataDir() };
      // Edge a asks for more of its own (warren edge --fn-pool).
      const aPool = ['--fn-pool', 'debian-python:latest:python=2'];
      const procs = { a: await edge(s.url, 'a', aPool, dirOf.a), b: await edge(s.url, 'b', [], dirOf.b) };
      const fnOf = async (): Promise<Record<string, { workers: number; busy: number; calls: number }>> =>
        Object.fromEntries((await client.nodes()).nodes.map((n) => [n.id, n.fn]));
      // The server's pool is kept on each node, by the node; a's own is kept on a.
      await until(async () => (await fnOf()).a!.workers >= 2 && (await fnOf()).b!.workers >= 1, 90_000);
      assert.deepEqual(
        Object.values(await fnOf()).map((f) => f.workers),
        [2, 1],
      );
      assert.equal((await client.fn.run({ language: 'python', code: 'print(6 * 7)' })).stdout, '42\n');
      // Calls at once go to both nodes: each has a warm worker, then starts more of its own.
      const batch = await client.fn.batch(
        Array.from({ length: 8 }, (_, i) => ({ language: 'python' as const, code: `import time; time.sleep(0.5); print(${i})` })),
      );
      assert.deepEqual(
        batch.map((r) => ('error' in r ? r.error.message : r.stdout)),
        Array.from({ length: 8 }, (_, i) => `${i}\n`),
      );
      await until(async () => Object.values(await fnOf()).every((f) => f.calls >= 2), 10_000);
      // run_code (SandboxFusion) the same way, through the cluster.
      const rc = await api(s.url, 'POST', '/run_code', { code: 'print(7 * 6)', language: 'python' });
      assert.equal(rc.status, 200, JSON.stringify(rc.json));
      assert.equal((rc.json.run_result as { stdout: string }).stdout, '42\n');
      const metrics = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } }).then((r) => r.text());
      assert.match(metrics, /warren_node_fn_calls_total\{node="a"\} [1-9]/);
      assert.match(metrics, /warren_node_fn_calls_total\{node="b"\} [1-9]/);

      // A tenant's workers count in its quota on every replica: made for a call through this
      // one, another replica (which never sent a call) sees them in the nodes' heartbeats.
      const quotaKey = await client.createKey({ tenant: 'q', role: 'runner', quota: { cpu: 1.2 } });
      const asQ = new Warren({ url: s.url, apiKey: quotaKey });
      await asQ.fn.run({ language: 'python', code: 'print(1)', resources: { cpu: 0.5, memoryMiB: 256 } });
      const answered = Date.now();
      const two = await server({ database });
      await until(async () => (await two.client.nodes()).nodes.every((n) => Date.parse(n.lastHeartbeatAt) > answered + 50), 10_000);
      const qTwo = new Warren({ url: two.s.url, apiKey: quotaKey });
      await assert.rejects(
        qTwo.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 1, memoryMiB: 64 } }),
        (e: { code?: string; message?: string }) => e.code === 'resource_exhausted' && /quota/.test(e.message ?? ''),
      );
      // What the quota leaves (1.2 less the worker's 0.5) is still there.
      await (await qTwo.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.5, memoryMiB: 64 } })).delete();

      // A call on a node that dies answers unavailable; the next calls go to the node left.
      const long = client.fn.run({ language: 'python', code: 'import time; time.sleep(60)', timeoutMs: 90_000 }).then(
        () => 'answered',
        (e: { code?: string }) => e.code,
      );
      let busyOn: 'a' | 'b' | undefined;
      await until(async () => {
        const f = await fnOf();
        busyOn = (['a', 'b'] as const).find((id) => (f[id]?.busy ?? 0) > 0);
        return busyOn !== undefined;
      }, 10_000);
      await procs[busyOn!].kill('SIGKILL');
      assert.equal(await long, 'unavailable');
      for (let i = 0; i < 4; i++) assert.equal((await client.fn.run({ language: 'python', code: `print(${i})` })).stdout, `${i}\n`);
      // Back, it removes the workers it left.
      await edge(s.url, busyOn!, busyOn === 'a' ? aPool : [], dirOf[busyOn!]);
    });

    test(
      'warm pools across two edges: each keeps its share, a create claims from either, a node lost moves its share to the other',
      { timeout: 120_000 },
      async () => {
        const { s, client } = await server();
        const dirOf = { a: await dataDir(), b: await dataDir() };
        const procs = { a: await edge(s.url, 'a', [], dirOf.a), b: await edge(s.url, 'b', [], dirOf.b) };
        const spec = { image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 } };
        const held = async (): Promise<Record<string, number>> => Object.fromEntries((await client.nodes()).nodes.map((n) => [n.id, n.sandboxes]));
        const ready = async (): Promise<number> => (await client.pools.list())[0]?.ready ?? -1;
        const pool = await client.pools.create({ ...spec, size: 4 });
        await until(async () => (await ready()) === 4, 30_000);
        // Each node keeps its share: 2 and 2 (nodes count the members they hold, and list them per pool).
        assert.deepEqual(await held(), { a: 2, b: 2 });
        assert.deepEqual(
          (await client.nodes()).nodes.map((n) => n.pools.map((p) => [p.id, p.ready])),
          [[[pool.id, 2]], [[pool.id, 2]]],
        );
        const claimed = await client.sandboxes.create(spec);
        assert.equal((await client.pools.list())[0]!.claims, 1);
        assert.equal((await claimed.exec('echo claimed')).stdout, 'claimed\n');
        const on = claimed.info.node as 'a' | 'b';
        // Refilled where it was taken.
        await until(async () => (await held())[on] === 3 && (await ready()) === 4, 30_000);
        // A node lost: the pool keeps its size from the other.
        const lost = on === 'a' ? 'b' : 'a';
        await procs[lost].kill('SIGKILL');
        await until(async () => (await nodeStates(client))[lost] === 'down', 10_000);
        await until(async () => (await ready()) === 4 && (await held())[on] === 5, 30_000);
        // Deleted, its members go; the claimed sandbox stays.
        await client.pools.delete(pool.id);
        await until(async () => (await held())[on] === 1, 10_000);
        assert.equal((await claimed.exec('echo still')).stdout, 'still\n');
        await claimed.delete();
        // Back, the lost node removes the members it left.
        await edge(s.url, lost, [], dirOf[lost]);
      },
    );

    test('an edge killed (-9) is marked down, its sandboxes failed with a reason; restarted, it joins again and removes what it left', async () => {
      const { s, client } = await server();
      const aDir = await dataDir();
      const a = await edge(s.url, 'a', [], aDir);
      await edge(s.url, 'b');
      await api(s.url, 'POST', '/v1/nodes/b/drain');
      const onA = await Promise.all([0, 1].map(() => client.sandboxes.create({ image: 'busybox:latest' })));
      assert.deepEqual(
        onA.map((x) => x.info.node),
        ['a', 'a'],
      );
      await api(s.url, 'POST', '/v1/nodes/b/ready');
      const inits = await Promise.all(onA.map((x) => initOf(x.id)));
      await a.kill('SIGKILL');
      await until(async () => (await nodeStates(client)).a === 'down', 10_000);
      // Listed while the node is down, failed with why; calls on them answer at once.
      for (const x of onA) {
        const got = (await client.sandboxes.get(x.id)).info;
        assert.equal(got.state, 'failed');
        assert.match(got.error?.message ?? '', /node a stopped answering/);
        assert.deepEqual([got.end?.reason, got.end?.by], ['node_lost', 'platform']);
      }
      const r = await api(s.url, 'POST', `/v1/sandboxes/${onA[0]!.id}/exec`, { cmd: 'true' });
      assert.equal(r.json.error?.code, 'conflict');
      // The inits still run (the edge died, not the host), and creates go to the other node.
      for (const i of inits) assert.ok(i && (await initOf(onA[inits.indexOf(i)]!.id)));
      const elsewhere = await client.sandboxes.create({ image: 'busybox:latest' });
      assert.equal(elsewhere.info.node, 'b');
      // Back: it joins again, what it left is removed (nothing both failed and alive).
      await edge(s.url, 'a', [], aDir);
      assert.equal((await nodeStates(client)).a, 'ready');
      for (const x of onA) {
        assert.equal(await initOf(x.id), null);
        assert.deepEqual(hostLeftovers(x.id), []);
        assert.equal((await client.sandboxes.get(x.id)).info.state, 'failed');
      }
      await elsewhere.delete();
    });

    test('an edge stopped (SIGSTOP) past the down delay: lists answer meanwhile; resumed, it must join again and ends what it held', async () => {
      const { s, client } = await server();
      const a = await edge(s.url, 'a');
      const sb = await client.sandboxes.create({ image: 'busybox:latest' });
      assert.equal(sb.info.node, 'a');
      process.kill(a.pid, 'SIGSTOP');
      try {
        // Before the down delay the node is silent but not down: a list still answers (its live
        // state given up on after a bound), as it does once the node is down.
        const t0 = Date.now();
        assert.equal((await client.sandboxes.list()).sandboxes.length, 1);
        assert.ok(Date.now() - t0 < 5000, `a list with a silent node took ${Date.now() - t0} ms`);
        await until(async () => (await nodeStates(client)).a === 'down', 10_000);
        assert.equal((await client.sandboxes.get(sb.id)).info.state, 'failed');
        assert.ok(await initOf(sb.id), 'the stopped edge’s sandbox still runs');
      } finally {
        process.kill(a.pid, 'SIGCONT');
      }
      // Its next heartbeat is refused: it joins again, and the sandbox the store failed is ended.
      await until(async () => (await nodeStates(client)).a === 'ready', 10_000);
      await until(async () => (await initOf(sb.id)) === null, 10_000);
      assert.deepEqual(hostLeftovers(sb.id), []);
      assert.equal((await client.sandboxes.get(sb.id)).info.state, 'failed');
    });

    test('two replicas on one database: any answers any call; an edge refusing on its fresher view passes the create to the next node; a full cluster says why per node', async () => {
      // Heartbeats a minute apart: each replica's view of the nodes stays as it was when they joined.
      const one = await server({ heartbeatMs: 60_000, downAfterMs: 120_000 });
      const two = await server({ database: one.database, heartbeatMs: 60_000, downAfterMs: 120_000 });
      // `small` looks best (more memory free), but holds one sandbox; `big` holds two.
      await edge(one.s.url, 'small', ['--max-sandboxes', '1', '--memory-overcommit', '100']);
      await edge(two.s.url, 'big', ['--max-sandboxes', '2']);
      await until(async () => Object.keys(await nodeStates(one.client)).length === 2 && Object.keys(await nodeStates(two.client)).length === 2, 5000);
      const first = await one.client.sandboxes.create({ image: 'busybox:latest' });
      assert.equal(first.info.node, 'small');
      // Replica two has not seen it: it tries `small` first, which refuses; `big` takes it.
      const second = await two.client.sandboxes.create({ image: 'busybox:latest' });
      assert.equal(second.info.node, 'big');
      // Every call works through either replica.
      assert.equal((await two.client.sandboxes.get(first.id)).info.node, 'small');
      assert.equal((await (await two.client.sandboxes.get(first.id)).exec('echo via two')).stdout, 'via two\n');
      assert.equal((await (await one.client.sandboxes.get(second.id)).exec('echo via one')).stdout, 'via one\n');
      const retries = async (url: string): Promise<number> =>
        Number(
          /^warren_placement_retries_total (\d+)$/m.exec(await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text())?.[1],
        );
      assert.equal(await retries(two.s.url), 1);
      assert.equal(await retries(one.s.url), 0);
      const third = await two.client.sandboxes.create({ image: 'busybox:latest' });
      assert.equal(third.info.node, 'big');
      // Full: the error names each node and why (the edges' own words).
      const full = await api(two.s.url, 'POST', '/v1/sandboxes', { image: 'busybox:latest' });
      assert.equal(full.status, 429);
      assert.equal(full.json.error?.code, 'resource_exhausted');
      const why = (full.json.error as unknown as { details: { nodes: Record<string, string> } }).details.nodes;
      assert.deepEqual(Object.keys(why).sort(), ['big', 'small']);
      assert.match(why.small ?? '', /holds 1 sandboxes/);
      // Nothing was left of the refused create; the list through either replica is the same.
      const ids = async (c: Warren): Promise<string[]> => (await c.sandboxes.list()).sandboxes.map((x) => `${x.id}:${x.info.state}`).sort();
      assert.deepEqual(await ids(one.client), await ids(two.client));
      assert.equal((await ids(one.client)).length, 3);
      for (const x of [first, second, third]) await x.delete();
      // A key made through one replica works through both; revoked through one, it stops working
      // there at once and through the other within a second (each looks a key up again then).
      const made = await api(one.s.url, 'POST', '/v1/keys', { tenant: 'acme', role: 'user' });
      const key = made.json.key as string;
      assert.equal((await api(two.s.url, 'GET', '/v1/sandboxes', undefined, key)).status, 200);
      assert.equal((await api(one.s.url, 'GET', '/v1/sandboxes', undefined, key)).status, 200);
      assert.equal((await api(one.s.url, 'DELETE', `/v1/keys/${made.json.keyId as string}`)).status, 204);
      assert.equal((await api(one.s.url, 'GET', '/v1/sandboxes', undefined, key)).json.error?.code, 'unauthenticated');
      const t0 = Date.now();
      await until(async () => (await api(two.s.url, 'GET', '/v1/sandboxes', undefined, key)).json.error?.code === 'unauthenticated', 5000);
      assert.ok(Date.now() - t0 < 2000, `revoked through one replica, the key still worked through the other for ${Date.now() - t0} ms`);
      // A layer uploaded through replica one is used on `big`, which joined replica two: two
      // reads the blob from one (each replica keeps what was made through it).
      const up = await fetch(`${one.s.url}/v1/layers?name=ws/peer`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}` },
        body: makeTar([{ path: 'peer/README', content: 'through the other replica\n' }]),
      });
      assert.equal(up.status, 201, await up.text());
      assert.equal((await api(two.s.url, 'POST', '/v1/nodes/small/drain')).status, 204);
      await until(async () => (await nodeStates(two.client)).small === 'draining', 5000);
      const withLayer = await two.client.sandboxes.create({ image: 'busybox:latest', layers: ['ws/peer'] });
      assert.equal(withLayer.info.node, 'big');
      assert.equal((await withLayer.exec('cat /peer/README')).stdout, 'through the other replica\n');
      await withLayer.delete();
    });

    test('a batch goes to each node in one call; the sandboxes a node refuses on its fresher view move to the next node', async () => {
      // Heartbeats a minute apart: replica two's view of the nodes stays as it was when they joined.
      const one = await server({ heartbeatMs: 60_000, downAfterMs: 120_000 });
      const two = await server({ database: one.database, heartbeatMs: 60_000, downAfterMs: 120_000 });
      const sim = (url: string, nodeId: string, memoryMiB: number, sandboxes: number): Promise<RunningEdge> =>
        startSimulatedEdge({
          join: url,
          token: TOKEN,
          nodeId,
          listen: { host: '127.0.0.1', port: 0 },
          capacity: { cpu: 64, memoryMiB, sandboxes },
          logger: quiet,
        });
      // `small` looks better (more memory) but holds 3 sandboxes.
      const sims = [await sim(one.s.url, 'small', 65_536, 3), await sim(one.s.url, 'big', 32_768, 20)];
      try {
        await until(async () => Object.keys(await nodeStates(two.client)).length === 2, 5000);
        const batch = async (url: string, count: number): Promise<Array<{ id: string; node: string }>> => {
          const r = await api(url, 'POST', '/v1/sandboxes/batch', { count, template: { image: 'busybox:latest' } });
          assert.equal(r.status, 201, JSON.stringify(r.json));
          assert.deepEqual(r.json.errors, []);
          return r.json.sandboxes as Array<{ id: string; node: string }>;
        };
        // Through replica one, `small` filled while `big` is drained.
        assert.equal((await api(one.s.url, 'POST', '/v1/nodes/big/drain')).status, 204);
        assert.deepEqual(
          (await batch(one.s.url, 3)).map((x) => x.node),
          ['small', 'small', 'small'],
        );
        assert.equal((await api(one.s.url, 'POST', '/v1/nodes/big/ready')).status, 204);
        await until(async () => (await nodeStates(two.client)).big === 'ready', 5000);
        // Replica two still sees `small` empty: it sends it three in one call, which it refuses;
        // they move to `big`, with the three sent there at once.
        const made = await batch(two.s.url, 6);
        assert.deepEqual(
          made.map((x) => x.node),
          Array(6).fill('big'),
        );
        const retries = Number(
          /^warren_placement_retries_total (\d+)$/m.exec(
            await (await fetch(`${two.s.url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text(),
          )?.[1],
        );
        assert.equal(retries, 3);
        const listed = (await one.client.sandboxes.list({ state: 'running' })).sandboxes;
        assert.equal(listed.length, 9);
        assert.equal(listed.filter((x) => x.info.node === 'small').length, 3);
      } finally {
        for (const e of sims) await e.close();
      }
    });

    test('a replica killed in the middle of a create loses nothing: another one ends the create and removes what the node started', async () => {
      const { s, client, database } = await server({ staleCreateMs: 3000 });
      await edge(s.url, 'a');
      // This replica kills itself once the edge has made the sandbox, before it records it running.
      const dying = await serverProcess(database, { WARREN_TEST_CRASH_AT: 'create:started' });
      const r = await fetch(`${dying.url}/v1/sandboxes`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ image: 'busybox:latest' }),
      }).catch((e: unknown) => e);
      assert.ok(r instanceof Error, 'the create got no answer');
      await dying.exited;
      const [left] = (await client.sandboxes.list()).sandboxes;
      assert.ok(left, 'the record of the cut-off create');
      assert.ok(await initOf(left.id), 'the node made it');
      // The live replica ends it: failed with why, nothing of it left on the node.
      await until(async () => (await client.sandboxes.get(left.id)).info.state === 'failed', 10_000);
      assert.match((await client.sandboxes.get(left.id)).info.error?.message ?? '', /cut off/);
      await until(async () => (await initOf(left.id)) === null, 10_000);
      assert.deepEqual(hostLeftovers(left.id), []);
    });

    test('PostgreSQL restarted during a burst: each create is made or answers unavailable; after, the store and the nodes agree on every sandbox', async () => {
      const { s, client } = await server({ staleCreateMs: 6000 });
      const dirOf: Record<string, string> = { a: await dataDir(), b: await dataDir() };
      await Promise.all(Object.entries(dirOf).map(([name, dir]) => edge(s.url, name, [], dir)));
      // A sandbox whose init dies while the database is away: its end must not be lost.
      const victim = await client.sandboxes.create({ image: 'busybox:latest' });
      const victimInit = await initOf(victim.id);
      assert.ok(victimInit);
      const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
      // Single creates sent 40 ms apart, and a batch, while the database goes away and comes back.
      const singles = Array.from({ length: 24 }, (_, i) => sleep(i * 40).then(() => api(s.url, 'POST', '/v1/sandboxes', { image: 'busybox:latest' })));
      const batch = api(s.url, 'POST', '/v1/sandboxes/batch', { count: 12, template: { image: 'busybox:latest' } });
      await sleep(150);
      await pg.restart({
        downMs: 1000,
        whileDown: async () => {
          process.kill(victimInit.pid, 'SIGKILL');
          await until(async () => (await initOf(victim.id)) === null, 5000);
          // The edge notices within its sweep (a second) and reports it to a control plane
          // that cannot record it yet.
          await sleep(1500);
        },
      });
      const answers = await Promise.all(singles);
      const made: string[] = [];
      let unavailable = 0;
      for (const r of answers) {
        if (r.status === 201) made.push(r.json.id as string);
        else {
          assert.equal(r.json.error?.code, 'unavailable', JSON.stringify(r.json));
          unavailable++;
        }
      }
      const b = await batch;
      if (b.status === 201) {
        made.push(...(b.json.sandboxes as Array<{ id: string }>).map((x) => x.id));
        for (const e of b.json.errors as Array<{ code: string }>) assert.equal(e.code, 'unavailable', JSON.stringify(e));
      } else assert.equal(b.json.error?.code, 'unavailable', JSON.stringify(b.json));
      assert.ok(unavailable > 0, 'some creates came while the database was away');
      // The nodes stayed up: their heartbeats could not be recorded while it was away, and that
      // silence is not theirs (the down delay, 1.5 s here, counts again from its return).
      assert.deepEqual(await nodeStates(client), { a: 'ready', b: 'ready' });
      // Once it is back, creates are made again (no restart of the control plane).
      const again = await api(s.url, 'POST', '/v1/sandboxes', { image: 'busybox:latest' });
      assert.equal(again.status, 201, JSON.stringify(again.json));
      made.push(again.json.id as string);
      // Creates cut off in the middle (made on a node, not recorded running) are ended; then the
      // store and the nodes agree: every sandbox a node runs is one the store calls running, and
      // the other way round; every create answered 201 is one of them.
      await until(async () => (await client.sandboxes.list({ state: 'creating' })).sandboxes.length === 0, 30_000).catch(async () =>
        assert.fail(`creates left creating: ${JSON.stringify((await client.sandboxes.list({ state: 'creating' })).sandboxes.map((x) => x.id))}`),
      );
      await until(async () => (await client.sandboxes.get(victim.id)).info.state === 'failed', 10_000).catch(async () =>
        assert.fail(`the sandbox whose init died is ${JSON.stringify((await client.sandboxes.get(victim.id)).info)}`),
      );
      assert.match((await client.sandboxes.get(victim.id)).info.error?.message ?? '', /stopped on its own/);
      const running = (await client.sandboxes.list({ state: 'running', limit: 1000 })).sandboxes.map((x) => x.id).sort();
      const alive = async (): Promise<string[]> => {
        const ids: string[] = [];
        for (const dir of Object.values(dirOf))
          for (const id of await readdir(join(dir, 'sandboxes')).catch(() => [] as string[])) if (await initOf(id)) ids.push(id);
        return ids.sort();
      };
      // (A cut-off create's record is failed just before its node is told to remove it.)
      await until(async () => JSON.stringify(await alive()) === JSON.stringify(running), 10_000).catch(() => undefined);
      assert.deepEqual(await alive(), running);
      for (const id of made) assert.ok(running.includes(id), `${id}, answered 201, runs`);
      await Promise.all(running.map((id) => api(s.url, 'DELETE', `/v1/sandboxes/${id}`)));
      for (const id of [...running, victim.id]) assert.deepEqual(hostLeftovers(id), []);
    });

    test('edges whose clocks are an hour off: lifetimes run on the control plane’s clock, and the times it lists are its own (a control plane that takes TLS edges only)', async () => {
      const { s, client } = await server({ requireEdgeTls: true });
      const HOUR = 3_600_000;
      await edge(s.url, 'ahead', ['--tls'], undefined, { WARREN_TEST_CLOCK_OFFSET_MS: String(HOUR) });
      await edge(s.url, 'behind', ['--tls'], undefined, { WARREN_TEST_CLOCK_OFFSET_MS: String(-HOUR) });
      const plain = await api(s.url, 'POST', '/v1/nodes/join', { name: 'plain', address: '127.0.0.1:1', token: 'x'.repeat(24), boot: 'b' }, TOKEN);
      assert.equal(plain.json.error?.code, 'permission_denied');
      assert.match(plain.json.error?.message ?? '', /TLS only/);
      const on = async (node: string): Promise<Awaited<ReturnType<typeof client.sandboxes.create>>> => {
        const other = node === 'ahead' ? 'behind' : 'ahead';
        await api(s.url, 'POST', `/v1/nodes/${other}/drain`);
        try {
          const sb = await client.sandboxes.create({ image: 'busybox:latest', lifetime: { ttlSeconds: 120, idleTimeoutSeconds: 60 } });
          assert.equal(sb.info.node, node);
          return sb;
        } finally {
          await api(s.url, 'POST', `/v1/nodes/${other}/ready`);
        }
      };
      const t0 = Date.now();
      const made = [await on('ahead'), await on('behind')];
      // Each node sweeps every second: an hour ahead, a deadline sent on the control plane's clock
      // has long passed and the sandbox had been idle an hour.
      await new Promise((r) => setTimeout(r, 2500));
      for (const sb of made) {
        const { info } = await client.sandboxes.get(sb.id);
        assert.equal(info.state, 'running', `${info.node}: ${JSON.stringify(info)}`);
        const expires = Date.parse(info.expiresAt!);
        assert.ok(expires >= t0 + 118_000 && expires <= Date.now() + 122_000, `${info.node}: expires ${info.expiresAt}`);
        const active = Date.parse(info.lastActivityAt);
        assert.ok(active >= t0 - 2000 && active <= Date.now() + 2000, `${info.node}: last active ${info.lastActivityAt}`);
        assert.equal((await sb.exec('echo up')).stdout, 'up\n');
      }
      // An hour behind, a deadline a second away would wait an hour.
      const t1 = Date.now();
      for (const sb of made) await sb.setTimeout(1);
      await until(async () => (await Promise.all(made.map(async (sb) => (await client.sandboxes.get(sb.id)).info.state))).every((x) => x === 'stopped'), 8000);
      assert.ok(Date.now() - t1 < 6000);
      // An expiry is recorded first and the sandbox removed after (sandbox-ends.ts): its host parts go within seconds.
      await until(async () => made.every((sb) => hostLeftovers(sb.id).length === 0), 5000).catch(() => undefined);
      for (const sb of made) assert.deepEqual(hostLeftovers(sb.id), []);
      // Each replica measures every node's clock against its own, and says so.
      const offsets = Object.fromEntries((await client.nodes()).nodes.map((n) => [n.id, n.clockOffsetMs]));
      assert.ok(Math.abs(offsets.ahead! - HOUR) < 1000 && Math.abs(offsets.behind! + HOUR) < 1000, JSON.stringify(offsets));
    });
  },
);
