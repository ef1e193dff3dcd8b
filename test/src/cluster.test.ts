// run-tests: alone, leases timed to half a second.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { connect as tlsConnect } from 'node:tls';
import { nodeTag } from '@warren/edge';
import { Warren } from '@warren/sdk';
import { makeTar } from './tar-writer.js';
import { fakeEdge, textServer, upgradeStatus } from './cluster-fakes.js';
import { KEY, TOKEN, api, nodeStates, rerun, useCluster } from './cluster-harness.js';
import { hostLeftovers, initOf, spawnEdge, until } from './harness.js';
// Several nodes on this machine: a control plane (in this process, its state in PostgreSQL) and
// edges as processes of their own (`warren edge --join`), each with its own data dir, killed,
// stopped and started again: joins, calls reaching each node, FnCall and pools over two nodes, a
// node lost. Replicas and PostgreSQL's own failures: cluster-replicas.test.ts. The cluster always
// speaks the edge protocol and keeps its state in PostgreSQL, so the suite's other passes
// (transport, store) have nothing to add: it runs once.

describe(
  'a cluster: warren server and edges that join it',
  { skip: rerun ? 'the cluster runs once (it always speaks the edge protocol, on PostgreSQL)' : false },
  () => {
    const cluster = useCluster('cluster');
    const { dataDir, server, edge } = cluster;

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
      // Placement goes by each node's last load (its heartbeat, or a create's answer) and the
      // creates in flight: the deletes above show at the next heartbeat, and a node whose load
      // still counts them looks fuller, so all four could go to the other (failed once in CI).
      await until(async () => (await client.nodes()).nodes.every((n) => n.sandboxes === 0), 10_000);
      const leased = await Promise.all(Array.from({ length: 4 }, () => client.sandboxes.create({ image: 'busybox:latest', lease: lease.id })));
      assert.deepEqual([...new Set(leased.map((x) => x.info.node))].sort(), ['a', 'b']);
      const first = Date.parse((await lease.renew(2)).expiresAt);
      const deadline = Date.parse((await lease.renew(4)).expiresAt);
      await until(async () => Date.now() > first + 500, 5000);
      for (const sb of leased) assert.equal((await client.sandboxes.get(sb.id)).info.state, 'running');
      await until(async () => (await Promise.all(leased.map((sb) => client.sandboxes.get(sb.id)))).every((x) => x.info.state === 'stopped'), 10_000);
      assert.ok(Date.now() - deadline <= 1500, `the lease's sandboxes ended ${Date.now() - deadline} ms after its deadline`);
      // Ended, each is removed from its host meanwhile (a burst of ends side by side): soon after, nothing of it is left.
      await until(async () => leased.every((sb) => hostLeftovers(sb.id).length === 0), 10_000).catch(() => undefined);
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
  },
);
