/**
 * FnCall on one node against a cluster of two edges, in one run on this machine: `warren up`,
 * then `warren server` (PostgreSQL on this machine) with two `warren edge` processes joined to
 * it; the same closed loop against each (CONCURRENCY clients, each sending its next `print(1)`
 * when the last answers). Prints calls/s, p50 and p99, and the CPU each process spent per call
 * (read from /proc), so the figure for more nodes can be computed: the control plane's CPU per
 * call bounds what one replica routes, an edge's what one node serves. Prints numbers; asserts
 * nothing. `npm run bench:fn-cluster`; FN_CALLS (default 1500), FN_WORKERS per node (default 2).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestPostgres } from '@warren/server';
import { Warren } from '@warren/sdk';
import { pct } from './stats.js';
import { startWarrenUp } from './warren-up.js';

const CLI = fileURLToPath(new URL('../../packages/cli/dist/main.js', import.meta.url));
const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';
const CONCURRENCY = 16;
const CALLS = Number(process.env.FN_CALLS ?? 1500);
const WORKERS = Number(process.env.FN_WORKERS ?? 2);
const TOKEN = 'bench-join-token-0123456789abcdef';
const KEY = 'bench-key';
const TICK_MS = 1000 / 100;

/** A process's user + system CPU so far (ms), from /proc/PID/stat. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

async function closedLoop(client: Warren, calls: number): Promise<{ perSec: number; p50: number; p99: number }> {
  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < calls) {
        next++;
        const t = performance.now();
        const r = await client.fn.run({ language: 'python', code: 'print(1)' });
        if (r.stdout !== '1\n') throw new Error(`a call answered ${JSON.stringify(r)}`);
        lat.push(performance.now() - t);
      }
    }),
  );
  const s = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  return { perSec: calls / s, p50: pct(lat, 50), p99: pct(lat, 99) };
}

function started(child: ChildProcess, re: RegExp, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = re.exec(out);
      if (m?.[1]) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`${what} exited (${code}): ${out.slice(-2000)}`)));
  });
}

const stop = (c: ChildProcess): Promise<void> =>
  new Promise((resolve) => {
    if (c.exitCode !== null) return resolve();
    c.on('exit', () => resolve());
    c.kill('SIGTERM');
  });

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model.trim()}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  console.log(`${CALLS} calls of python print(1), ${CONCURRENCY} clients in a closed loop, ${WORKERS} workers per node`);
  const dirs: string[] = [];
  const dir = async (): Promise<string> => {
    const d = await mkdtemp(join(tmpdir(), 'warren-bench-fn-'));
    dirs.push(d);
    return d;
  };
  const fnFlags = ['--fn-pool', `debian-python:latest:python=${WORKERS}`, '--fn-max-workers', String(WORKERS), '--no-zram-swap'];
  const rows: string[] = [];
  try {
    // One node.
    const up = await startWarrenUp(await dir(), ['--no-network', ...fnFlags]);
    try {
      await closedLoop(up.client, 100);
      const r = await closedLoop(up.client, CALLS);
      rows.push(`one node (warren up)                 ${r.perSec.toFixed(0).padStart(6)} calls/s   p50 ${r.p50.toFixed(1)} ms   p99 ${r.p99.toFixed(1)} ms`);
    } finally {
      await up.stop();
    }

    // A control plane and two edges.
    const pg = await startTestPostgres();
    const procs: ChildProcess[] = [];
    try {
      const server = spawn(
        process.execPath,
        [
          CLI,
          'server',
          '--port',
          '0',
          '--data-dir',
          await dir(),
          '--database',
          await pg.createDatabase('fn'),
          '--images',
          'busybox:latest,debian-python:latest',
          '--image-cache',
          IMAGE_CACHE,
          '--fn-pool',
          `debian-python:latest:python=${WORKERS}`,
        ],
        { env: { ...process.env, WARREN_JOIN_TOKEN: TOKEN, WARREN_API_KEY: KEY }, stdio: ['ignore', 'pipe', 'inherit'] },
      );
      procs.push(server);
      const url = await started(server, /running at (http:\/\/\S+)/, 'warren server');
      const edges = await Promise.all(
        ['a', 'b'].map(async (name) => {
          const e = spawn(
            process.execPath,
            [
              CLI,
              'edge',
              '--join',
              url,
              '--name',
              name,
              '--listen',
              '127.0.0.1:0',
              '--data-dir',
              await dir(),
              '--images',
              'busybox:latest',
              '--no-zram-swap',
              '--no-network',
              '--fn-max-workers',
              String(WORKERS),
            ],
            { env: { ...process.env, WARREN_JOIN_TOKEN: TOKEN, WARREN_API_KEY: '' }, stdio: ['ignore', 'pipe', 'inherit'] },
          );
          procs.push(e);
          await started(e, /its edge protocol is at (\S+)/, `warren edge ${name}`);
          return e;
        }),
      );
      const client = new Warren({ url, apiKey: KEY });
      // Warm: the pools on both nodes, then a first round.
      for (let i = 0; i < 600; i++) {
        const nodes = (await client.nodes()).nodes;
        if (nodes.length === 2 && nodes.every((n) => n.fn.workers >= WORKERS)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      await closedLoop(client, 100);
      const before = { server: cpuMs(server.pid!), edges: edges.map((e) => cpuMs(e.pid!)) };
      const r = await closedLoop(client, CALLS);
      const cp = (cpuMs(server.pid!) - before.server) / CALLS;
      const perEdge = edges.map((e, i) => (cpuMs(e.pid!) - before.edges[i]!) / CALLS);
      const byNode = Object.fromEntries((await client.nodes()).nodes.map((n) => [n.id, n.fn.calls]));
      rows.push(`two edges (warren server + 2 edges)  ${r.perSec.toFixed(0).padStart(6)} calls/s   p50 ${r.p50.toFixed(1)} ms   p99 ${r.p99.toFixed(1)} ms`);
      rows.push(
        `  CPU per call: control plane ${cp.toFixed(2)} ms; edges ${perEdge.map((x) => x.toFixed(2)).join(' and ')} ms (their processes, not the calls' own); calls per node ${JSON.stringify(byNode)}`,
      );
    } finally {
      await Promise.all(procs.reverse().map(stop));
      await pg.stop();
    }
  } finally {
    for (const d of dirs) await rm(d, { recursive: true, force: true }).catch(() => undefined);
  }
  for (const r of rows) console.log(r);
}

await main();
