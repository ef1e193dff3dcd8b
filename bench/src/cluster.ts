// Warren benchmark: one control-plane process placing sandboxes over many nodes. The nodes are
// simulated (`warren edge --simulate`: the real edge's admission, accounting, EdgeApi and network
// transport, joins and heartbeats, over a backend that makes no sandboxes), all in this process,
// each on a TCP port of its own; the control plane is `warren server` in a process of its own,
// its state in a private PostgreSQL on this machine (a Unix socket, fsync off as in the tests).
// Phases: a burst of single creates, a burst of batch creates, FnCalls (`--fn-calls`: half one by
// one on /v1/fn/run, `--concurrency` at a time, half in /v1/fn/batch calls of `--fn-batch`; the
// simulated nodes' workers answer at once, so what is measured is the control plane's routing
// and the edges' FnWorkers, not the calls), then a steady state: the cluster filled to `--steady`
// sandboxes, then creates and deletes side by side for `--churn-seconds`.
// Prints creates/s, create latency (p50/p99, what a client waits for a placement), balance (the
// most loaded node against the mean), retries on another node after an edge refused on its
// fresher view, and database round trips per create; calls/s, call latency and CPU per call for
// FnCall. Asserts nothing.
// `--replicas N`: N `warren server` processes on the one PostgreSQL, the nodes joined to them in
// turn and the load spread over them (call i to replica i mod N); the rates printed are the
// cluster's (the sum of the replicas'), the CPU per create each replica's own.
// Usage: npm run bench:cluster [-- --nodes 160 --burst 32000 --steady 380000 --concurrency 128 --batch 1000 --churn-seconds 20
//   --fn-calls 40000 --fn-batch 500 --replicas 1 --phases single,batch,fn,idle,steady]
// (WARREN_BENCH_PROFILE=DIR: a CPU profile of each replica; node --cpu-prof for this process's;
// WARREN_BENCH_PG_STATEMENTS=1: PostgreSQL's statements of each phase by their time, from pg_stat_statements.)
import { parseArgs } from 'node:util';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { readFileSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimulatedEdge, type RunningEdge } from '@warren/edge';
import { startTestPostgres } from '@warren/server';
import { machineLine } from './side-by-side.js';
import { processCpuSeconds } from './stats.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '160' },
    burst: { type: 'string', default: '32000' },
    steady: { type: 'string', default: '380000' },
    concurrency: { type: 'string', default: '128' },
    batch: { type: 'string', default: '1000' },
    'batch-parallel': { type: 'string', default: '4' },
    'churn-seconds': { type: 'string', default: '20' },
    'per-node': { type: 'string', default: '2400' },
    'fn-calls': { type: 'string', default: '40000' },
    'fn-batch': { type: 'string', default: '500' },
    /** Control-plane processes on the one PostgreSQL. */
    replicas: { type: 'string', default: '1' },
    /** Which phases run: single, batch, fn, idle (20 s of nothing), steady (default all but idle). */
    phases: { type: 'string', default: 'single,batch,fn,steady' },
  },
});
const PHASES = new Set(values.phases.split(','));
/** The control plane's processes, one a replica (for their CPU time). */
let serverPids: number[] = [];
/** The replicas' URLs: call i goes to `urls[i % urls.length]`. */
let urls: string[] = [];
const REPLICAS = Number(values.replicas);
const NODES = Number(values.nodes);
const BURST = Number(values.burst);
const STEADY = Number(values.steady);
const CONCURRENCY = Number(values.concurrency);
const BATCH = Number(values.batch);
const BATCH_PARALLEL = Number(values['batch-parallel']);
const CHURN_S = Number(values['churn-seconds']);
const PER_NODE = Number(values['per-node']);
const FN_CALLS = Number(values['fn-calls']);
const FN_BATCH = Number(values['fn-batch']);

const TOKEN = 'bench-join-token-0123456789';
const KEY = 'bench-admin-key';
const CLI = new URL('../../packages/cli/dist/main.js', import.meta.url).pathname;
const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';
const TEMPLATE = { image: 'busybox:latest', resources: { cpu: 1, memoryMiB: 256 } };
/** A FnCall: a simulated worker answers `ok` at once whatever it is asked. */
const FN_CALL = { language: 'bash', code: 'echo ok', image: TEMPLATE.image, maxOutputBytes: 1024 };
const quiet = { info: () => undefined, warn: () => undefined };
const PG_STATEMENTS = process.env.WARREN_BENCH_PG_STATEMENTS === '1';
/** Runs SQL on the benchmark's database with psql (set once PostgreSQL is up); answers its output. */
let psql: (sql: string) => string = () => '';

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f1 = (x: number): string => x.toFixed(1);

// The load's client: node:http on kept-alive connections (fetch costs this process several
// times the CPU per call, and the control plane shares the machine's two cores with it).
const agent = new Agent({ keepAlive: true, maxSockets: 1024 });

function call(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(url + path, {
      method,
      agent,
      headers: {
        authorization: `Bearer ${KEY}`,
        ...(data === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) }),
      },
    });
    req.once('error', reject);
    req.once('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.once('error', reject);
      res.once('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        resolve({ status: res.statusCode ?? 0, json: (text ? JSON.parse(text) : {}) as Record<string, unknown> });
      });
    });
    req.end(data);
  });
}

/**
 * CPU seconds used so far (user + system) by the control plane, by PostgreSQL (all its
 * processes; the bench runs its own), and by this process (the load and the simulated nodes).
 */
function cpuSeconds(): { server: number[]; postgres: number; bench: number } {
  let postgres = 0;
  for (const pid of readdirSync('/proc'))
    if (/^\d+$/.test(pid))
      try {
        // With the backends that ended (the postmaster waited for them): the sum never drops when a connection closes.
        if (readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('postgres')) postgres += processCpuSeconds(Number(pid), { children: true });
      } catch {
        // gone meanwhile
      }
  return { server: serverPids.map((pid) => processCpuSeconds(pid)), postgres, bench: processCpuSeconds('self') };
}

type Counters = { placed: number; retried: number; trips: number; fnRetried: number; fnWorkers: number; fnColdStarts: number };

/** The replicas' counters summed, and each one's placements. */
async function counters(): Promise<Counters & { placedBy: number[] }> {
  const each = await Promise.all(urls.map((u) => replicaCounters(u)));
  const sum = (k: keyof Counters): number => each.reduce((a, c) => a + c[k], 0);
  return {
    placed: sum('placed'),
    retried: sum('retried'),
    trips: sum('trips'),
    fnRetried: sum('fnRetried'),
    // The nodes' workers as the first replica's view says (every replica sees all nodes).
    fnWorkers: each[0]?.fnWorkers ?? NaN,
    fnColdStarts: sum('fnColdStarts'),
    placedBy: each.map((c) => c.placed),
  };
}

/** One replica's counters: placements, retries on another node, database round trips; FnCall's (the nodes' as their last loads say). */
async function replicaCounters(url: string): Promise<Counters> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
  const n = (name: string): number => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
  return {
    placed: n('warren_placements_total'),
    retried: n('warren_placement_retries_total'),
    trips: n('warren_store_round_trips_total'),
    fnRetried: n('warren_fn_retried_total'),
    fnWorkers: n('warren_fn_workers'),
    fnColdStarts: n('warren_fn_cold_starts_total'),
  };
}

/** The most loaded node's sandboxes against the mean (after the nodes' next heartbeat). */
async function balance(url: string): Promise<{ max: number; mean: number }> {
  await new Promise((r) => setTimeout(r, 1500));
  const nodes = (await call(url, 'GET', '/v1/nodes')).json.nodes as Array<{ sandboxes: number }>;
  const counts = nodes.map((n) => n.sandboxes);
  return { max: Math.max(...counts), mean: counts.reduce((a, b) => a + b, 0) / counts.length };
}

/** Runs `fn` `count` times, `concurrency` at a time; answers each call's ms. */
async function pool(count: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<number[]> {
  const ms: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      while (next < count) {
        const i = next++;
        const t = performance.now();
        await fn(i);
        ms.push(performance.now() - t);
      }
    }),
  );
  return ms;
}

/**
 * Runs `run` (answering its latencies): its wall time (s), the CPU seconds each side spent, and the
 * control plane's counters before and after (read again `settleMs` after it ends).
 */
async function measured(run: () => Promise<number[]>, settleMs = 0) {
  const before = await counters();
  const cpu0 = cpuSeconds();
  const t0 = performance.now();
  const ms = await run();
  const s = (performance.now() - t0) / 1000;
  const cpu1 = cpuSeconds();
  if (settleMs) await new Promise((r) => setTimeout(r, settleMs));
  const after = await counters();
  return { ms, s, before, after, cpu: cpuSpent(cpu0, cpu1) };
}

type CpuSpent = { server: number[]; postgres: number; bench: number };

function cpuSpent(a: CpuSpent, b: CpuSpent): CpuSpent {
  return { server: b.server.map((x, i) => x - (a.server[i] ?? 0)), postgres: b.postgres - a.postgres, bench: b.bench - a.bench };
}

/**
 * The CPU each side spent per `unit` (n of them): each replica's per what it served (`servedBy`,
 * default an equal share), PostgreSQL's and this process's per all n.
 */
function cpuPer(cpu: CpuSpent, n: number, unit: string, servedBy?: number[]): string {
  const per = (x: number, of = n): string => ((1000 * x) / of).toFixed(3);
  const server = cpu.server.map((x, i) => per(x, servedBy?.[i] || n / cpu.server.length));
  return `CPU ms per ${unit}: control plane ${server.length > 1 ? `${server.join(' and ')} (replicas)` : server[0]}, PostgreSQL ${per(cpu.postgres)}, load and simulated nodes ${per(cpu.bench)}`;
}

/** Each replica's placements between two readings of the counters. */
const placedBy = (before: { placedBy: number[] }, after: { placedBy: number[] }): number[] => after.placedBy.map((x, i) => x - (before.placedBy[i] ?? 0));

async function phase(label: string, n: number, run: () => Promise<number[]>): Promise<string[]> {
  psql('SELECT pg_stat_statements_reset()');
  const { ms, s, before, after, cpu } = await measured(run);
  if (PG_STATEMENTS) {
    console.log(
      psql(
        `SELECT calls, rows, round(total_exec_time::numeric, 1) AS exec_ms, round((1000 * total_exec_time / ${n})::numeric, 1) AS exec_us_per_create, round(total_plan_time::numeric, 1) AS plan_ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
         FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 8`,
      ),
    );
    console.log(
      psql(
        `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, pg_size_pretty(pg_relation_size('sandboxes')) AS heap, pg_size_pretty(pg_indexes_size('sandboxes')) AS indexes FROM pg_stat_user_tables WHERE relname = 'sandboxes'`,
      ),
    );
  }
  const b = await balance(urls[0]!);
  const served = placedBy(before, after);
  const placed = after.placed - before.placed;
  const line =
    `${label}: ${n} creates in ${f1(s)} s = ${Math.round(n / s)}/s${urls.length > 1 ? ` (${urls.length} replicas: ${served.map((x) => Math.round(x / s)).join(' + ')})` : ''}; latency p50 ${f1(pct(ms, 50))} ms, p99 ${f1(pct(ms, 99))} ms ` +
    `(per ${label.includes('batch') ? `batch call of ${BATCH}` : 'create'}); balance max/mean ${(b.max / b.mean).toFixed(3)} (${b.max} vs ${f1(b.mean)}); ` +
    `retries ${after.retried - before.retried}; database round trips per create ${(placed ? (after.trips - before.trips) / placed : NaN).toFixed(2)}; ` +
    cpuPer(cpu, n, 'create', served);
  console.log(line);
  return [line];
}

/** FnCalls through the control plane: calls/s, latency, CPU per call, workers made (after the nodes' next heartbeat). */
async function fnPhase(label: string, calls: number, per: string, run: () => Promise<number[]>): Promise<void> {
  const { ms, s, before, after, cpu } = await measured(run, 1500);
  console.log(
    `${label}: ${calls} calls in ${f1(s)} s = ${Math.round(calls / s)}/s; latency p50 ${f1(pct(ms, 50))} ms, p99 ${f1(pct(ms, 99))} ms (per ${per}); ` +
      `workers ${after.fnWorkers} on the nodes (cold starts ${after.fnColdStarts - before.fnColdStarts}); retried on another node ${after.fnRetried - before.fnRetried}; ` +
      `database round trips per call ${((after.trips - before.trips) / calls).toFixed(2)}; ` +
      cpuPer(cpu, calls, 'call'),
  );
}

/** Fails on a FnCall that did not answer as a simulated worker does. */
function checkFn(r: unknown): void {
  const x = r as { stdout?: string; exitCode?: number; error?: unknown };
  if (x.stdout !== 'ok\n' || x.exitCode !== 0) throw new Error(`FnCall: ${JSON.stringify(r)}`);
}

async function main(): Promise<void> {
  console.log(machineLine());
  console.log(`${NODES} simulated nodes of ${PER_NODE} sandboxes; creates of ${JSON.stringify(TEMPLATE.resources)}`);
  console.log(`${REPLICAS} control-plane replica${REPLICAS > 1 ? 's' : ''} on one PostgreSQL`);
  const pg = await startTestPostgres(
    PG_STATEMENTS ? { settings: ['shared_preload_libraries=pg_stat_statements', 'pg_stat_statements.track_planning=on'] } : {},
  );
  const database = await pg.createDatabase('cluster');
  if (PG_STATEMENTS) {
    const bin = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a))[0] ?? '15';
    psql = (sql) =>
      spawnSync(`/usr/lib/postgresql/${bin}/bin/psql`, ['-h', pg.socketDir, '-U', 'warren', '-d', 'cluster', '-c', sql], { encoding: 'utf8' }).stdout;
    psql('CREATE EXTENSION pg_stat_statements');
  }
  const dirs: string[] = [];
  const edges: RunningEdge[] = [];
  const servers: ChildProcess[] = [];
  try {
    // WARREN_BENCH_PROFILE=DIR: each replica writes a CPU profile there when it stops.
    const profile = process.env.WARREN_BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.WARREN_BENCH_PROFILE}`] : [];
    for (let i = 0; i < REPLICAS; i++) {
      const dir = await mkdtemp(join(tmpdir(), 'warren-bench-cluster-'));
      dirs.push(dir);
      servers.push(
        spawn(
          process.execPath,
          [...profile, CLI, 'server', '--port', '0', '--data-dir', dir, '--database', database, '--images', 'busybox:latest', '--image-cache', IMAGE_CACHE],
          {
            env: { ...process.env, WARREN_JOIN_TOKEN: TOKEN, WARREN_API_KEY: KEY },
            stdio: ['ignore', 'pipe', 'inherit'],
          },
        ),
      );
    }
    serverPids = servers.map((s) => s.pid ?? 0);
    urls = await Promise.all(
      servers.map(
        (server) =>
          new Promise<string>((resolve, reject) => {
            let out = '';
            server.stdout?.on('data', (d: Buffer) => {
              out += d.toString();
              const m = /running at (http:\/\/\S+)/.exec(out);
              if (m?.[1]) resolve(m[1]);
            });
            server.on('exit', () => reject(new Error(`warren server exited: ${out}`)));
          }),
      ),
    );
    const url = urls[0]!;
    /** The replica call `i` goes to. */
    const to = (i: number): string => urls[i % urls.length]!;
    const t = performance.now();
    for (let i = 0; i < NODES; i += 16)
      edges.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(16, NODES - i) }, (_, j) =>
            startSimulatedEdge({
              join: to(i + j),
              token: TOKEN,
              nodeId: `sim-${String(i + j).padStart(3, '0')}`,
              listen: { host: '127.0.0.1', port: 0 },
              capacity: { cpu: PER_NODE, memoryMiB: PER_NODE * TEMPLATE.resources.memoryMiB, sandboxes: PER_NODE },
              logger: quiet,
            }),
          ),
        )),
      );
    console.log(`${NODES} nodes joined in ${f1((performance.now() - t) / 1000)} s`);

    const single = PHASES.has('batch') ? Math.floor(BURST / 2) : BURST;
    if (PHASES.has('single'))
      await phase('burst, single creates', single, () =>
        pool(single, CONCURRENCY, async (i) => {
          const r = await call(to(i), 'POST', '/v1/sandboxes', TEMPLATE);
          if (r.status !== 201) throw new Error(`create: ${r.status} ${JSON.stringify(r.json)}`);
        }),
      );
    const batches = Math.ceil((BURST - single) / BATCH);
    if (PHASES.has('batch'))
      await phase('burst, batch creates', BURST - single, () =>
        pool(batches, BATCH_PARALLEL, async (i) => {
          const count = Math.min(BATCH, BURST - single - i * BATCH);
          const r = await call(to(i), 'POST', '/v1/sandboxes/batch', { count, template: TEMPLATE });
          const errors = r.json.errors as unknown[] | undefined;
          if (r.status !== 201 || errors?.length) throw new Error(`batch: ${r.status} ${JSON.stringify(errors?.slice(0, 3))}`);
        }),
      );

    if (PHASES.has('fn')) {
      const single = Math.floor(FN_CALLS / 2);
      await fnPhase('FnCall, one by one (/v1/fn/run)', single, 'call', () =>
        pool(single, CONCURRENCY, async (i) => {
          const r = await call(to(i), 'POST', '/v1/fn/run', FN_CALL);
          if (r.status !== 200) throw new Error(`fn/run: ${r.status} ${JSON.stringify(r.json)}`);
          checkFn(r.json);
        }),
      );
      const inBatches = FN_CALLS - single;
      await fnPhase(`FnCall, batches of ${FN_BATCH} (/v1/fn/batch)`, inBatches, `batch call of ${FN_BATCH}`, () =>
        pool(Math.ceil(inBatches / FN_BATCH), BATCH_PARALLEL, async (i) => {
          const count = Math.min(FN_BATCH, inBatches - i * FN_BATCH);
          const r = await call(to(i), 'POST', '/v1/fn/batch', { calls: Array(count).fill(FN_CALL) });
          if (r.status !== 200) throw new Error(`fn/batch: ${r.status} ${JSON.stringify(r.json)}`);
          for (const x of r.json.results as unknown[]) checkFn(x);
        }),
      );
    }
    if (PHASES.has('idle')) {
      // What the cluster costs doing nothing: 160 nodes' heartbeats and the control plane's timers.
      const cpu0 = cpuSeconds();
      await new Promise((r) => setTimeout(r, 20_000));
      const { server, ...cpu } = cpuSpent(cpu0, cpuSeconds());
      console.log(
        `idle, 20 s: CPU per second: control plane ${server.map((x) => f1((1000 * x) / 20)).join(' and ')} ms, PostgreSQL ${f1((1000 * cpu.postgres) / 20)} ms, simulated nodes ${f1((1000 * cpu.bench) / 20)} ms`,
      );
    }
    if (!PHASES.has('steady')) return;
    // Steady state: filled to STEADY, then creates and deletes side by side.
    const fill = Math.max(0, STEADY - BURST);
    if (fill) {
      await phase(`fill to ${STEADY}, batch creates`, fill, () =>
        pool(Math.ceil(fill / BATCH), BATCH_PARALLEL, async (i) => {
          const count = Math.min(BATCH, fill - i * BATCH);
          const r = await call(to(i), 'POST', '/v1/sandboxes/batch', { count, template: TEMPLATE });
          const errors = r.json.errors as unknown[] | undefined;
          if (r.status !== 201 || errors?.length) throw new Error(`batch: ${r.status} ${JSON.stringify(errors?.slice(0, 3))}`);
        }),
      );
    }
    // Ids to delete: a page of the oldest, then the ones churn makes.
    const ids = ((await call(url, 'GET', `/v1/sandboxes?limit=1000`)).json.sandboxes as Array<{ id: string }>).map((x) => x.id);
    const created: number[] = [];
    const deleted: number[] = [];
    const until = performance.now() + CHURN_S * 1000;
    const before = await counters();
    const cpu0 = cpuSeconds();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, w) => {
        while (performance.now() < until) {
          const t = performance.now();
          if (w % 2 === 0 || ids.length === 0) {
            const r = await call(to(w >> 1), 'POST', '/v1/sandboxes', TEMPLATE);
            if (r.status !== 201) throw new Error(`create: ${r.status} ${JSON.stringify(r.json)}`);
            ids.push(r.json.id as string);
            created.push(performance.now() - t);
          } else {
            const id = ids.shift()!;
            await call(to(w >> 1), 'DELETE', `/v1/sandboxes/${id}`);
            deleted.push(performance.now() - t);
          }
        }
      }),
    );
    const cpu = cpuSpent(cpu0, cpuSeconds());
    const ops = created.length + deleted.length;
    const after = await counters();
    const b = await balance(url);
    console.log(
      `steady state at ~${STEADY}: ${Math.round(created.length / CHURN_S)} creates/s and ${Math.round(deleted.length / CHURN_S)} deletes/s for ${CHURN_S} s; ` +
        `create p50 ${f1(pct(created, 50))} ms, p99 ${f1(pct(created, 99))} ms; delete p50 ${f1(pct(deleted, 50))} ms, p99 ${f1(pct(deleted, 99))} ms; ` +
        `balance max/mean ${(b.max / b.mean).toFixed(3)}; retries ${after.retried - before.retried}; database round trips per operation ${((after.trips - before.trips) / ops).toFixed(2)}; ` +
        cpuPer(cpu, ops, 'operation'),
    );
  } finally {
    // A clean stop (a profile, if one is asked for with NODE_OPTIONS=--cpu-prof, is written then).
    await Promise.all(
      servers.map(async (server) => {
        if (server.exitCode !== null) return;
        server.kill('SIGTERM');
        await Promise.race([new Promise((r) => server.once('exit', r)), new Promise((r) => setTimeout(r, 5000))]);
        server.kill('SIGKILL');
      }),
    );
    await Promise.all(edges.map((e) => e.close().catch(() => undefined)));
    agent.destroy();
    await pg.stop();
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
