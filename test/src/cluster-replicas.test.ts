// run-tests: alone, failovers timed to two seconds.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { startSimulatedEdge, type RunningEdge } from '@warren/edge';
import { type Warren } from '@warren/sdk';
import { makeTar } from './tar-writer.js';
import { KEY, TOKEN, api, nodeStates, quiet, rerun, useCluster } from './cluster-harness.js';
import { hostLeftovers, initOf, until } from './harness.js';
// A cluster's control plane as more than one replica on one PostgreSQL, and its failures: a
// replica killed in a create, PostgreSQL restarted in a burst, batches a node refuses in part,
// edges whose clocks are off. Edges are processes of their own (`warren edge --join`) or
// simulated in this process. It runs once (see cluster.test.ts).

describe(
  'a cluster of replicas on one PostgreSQL',
  { skip: rerun ? 'the cluster runs once (it always speaks the edge protocol, on PostgreSQL)' : false },
  () => {
    const cluster = useCluster('replicas');
    const { dataDir, server, serverProcess, edge } = cluster;

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
      // A command through one replica goes straight to the node it last found the sandbox on; deleted
      // through the other, the next one through it fails as the store says, not as the node does.
      const routed = async (url: string): Promise<number> =>
        Number(
          /^warren_sandbox_calls_total\{route="known"\} (\d+)$/m.exec(
            await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text(),
          )?.[1],
        );
      const before = await routed(one.s.url);
      const viaOne = await one.client.sandboxes.get(second.id);
      assert.equal((await viaOne.exec('echo again')).stdout, 'again\n');
      assert.equal(await routed(one.s.url), before + 1);
      for (const x of [first, second, third]) await x.delete();
      await assert.rejects(viaOne.exec('true'), (e: Error & { code?: string }) => e.code === 'conflict' && e.message === `sandbox ${second.id} is stopped`);
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
      // Its cgroups go after its init, one controller after another: the removal may still be under way.
      await until(async () => hostLeftovers(left.id).length === 0, 10_000).catch(() => undefined);
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
      await cluster.pg().restart({
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
