/**
 * FnCall: calls/s and latency of `print(1)` in Python and `echo` in bash with 16 concurrent
 * clients (and Python's through SandboxFusion's `POST /run_code`, as its clients send it), against a fresh sandbox per call (create + exec + delete) and `podman run --rm` per
 * call on the same machine. Closed loop (each client sends its next call when the last answers:
 * the most calls/s, and latency = 16 / rate) and paced (16 clients together offering a fixed
 * rate: the latency of a call at that load). `npm run bench:fn`; FN_CALLS (default 2000),
 * FN_WORKERS (default 4).
 */
import { spawnSync, execFile } from 'node:child_process';
import { Agent, request } from 'node:http';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { HostHelper } from '@warren/edge';
import type { Warren } from '@warren/sdk';
import { PODMAN_FLAGS } from './baselines.js';
import { pct, pool } from './stats.js';
import { startWarrenUp, type BenchNode } from './warren-up.js';

const run = promisify(execFile);
const CONCURRENCY = 16;
const CALLS = Number(process.env.FN_CALLS ?? 2000);
const WORKERS = Number(process.env.FN_WORKERS ?? 4);
const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';
const HOSTD = fileURLToPath(new URL('../../native/build/warren-hostd', import.meta.url));

interface Row {
  name: string;
  perSec: number;
  p50: number;
  p99: number;
  cpuMsPerCall: number | null;
}

function line(r: Row): string {
  const cpu = r.cpuMsPerCall === null ? '' : `  host CPU ${r.cpuMsPerCall.toFixed(1)} ms/call`;
  return `${r.name.padEnd(44)} ${r.perSec.toFixed(1).padStart(8)} calls/s   p50 ${r.p50.toFixed(1).padStart(7)} ms   p99 ${r.p99.toFixed(1).padStart(7)} ms${cpu}`;
}

/** Host CPU time (all processes) in ms, from /proc/stat. */
function hostCpuMs(): number {
  const f = spawnSync('head', ['-1', '/proc/stat']).stdout.toString().trim().split(/\s+/).slice(1).map(Number);
  const busy = f.reduce((a, b) => a + b, 0) - (f[3] ?? 0) - (f[4] ?? 0);
  return (busy * 1000) / 100;
}

async function measure(name: string, total: number, task: (i: number) => Promise<void>): Promise<Row> {
  const c0 = hostCpuMs();
  const r = await pool(total, CONCURRENCY, task);
  const cpu = hostCpuMs() - c0;
  return { name, perSec: (total / r.wallMs) * 1000, p50: pct(r.latencies, 50), p99: pct(r.latencies, 99), cpuMsPerCall: cpu / total };
}

/** Calls offered at `rate`/s by up to `clients` at once (a call waits for a free client). */
async function paced(name: string, rate: number, total: number, clients: number, task: () => Promise<void>): Promise<Row> {
  const latencies: number[] = [];
  let free = clients;
  const waiters: Array<() => void> = [];
  const c0 = hostCpuMs();
  const t0 = performance.now();
  const all: Array<Promise<void>> = [];
  for (let i = 0; i < total; i++) {
    const due = t0 + (i * 1000) / rate;
    const now = performance.now();
    if (due > now) await new Promise((r) => setTimeout(r, due - now));
    if (free === 0) await new Promise<void>((r) => waiters.push(r));
    free--;
    const s = performance.now();
    all.push(
      task().finally(() => {
        latencies.push(performance.now() - s);
        free++;
        waiters.shift()?.();
      }),
    );
  }
  await Promise.all(all);
  const wall = performance.now() - t0;
  return { name, perSec: (total / wall) * 1000, p50: pct(latencies, 50), p99: pct(latencies, 99), cpuMsPerCall: (hostCpuMs() - c0) / total };
}

/** SandboxFusion's `POST /run_code` of `body`, as its clients send it (JSON, the key as a bearer token, kept connections). */
function runCode(node: BenchNode, agent: Agent, body: object): Promise<{ status: string; run_result: { stdout: string } | null }> {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request(`${node.url}/run_code`, {
      method: 'POST',
      agent,
      headers: { authorization: `Bearer ${node.key}`, 'content-type': 'application/json', 'content-length': payload.length },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (b: Buffer) => parts.push(b));
      res.on('error', reject);
      res.on('end', () => {
        try {
          resolve(JSON.parse(Buffer.concat(parts).toString()) as never);
        } catch (e) {
          reject(e instanceof Error ? e : new Error(String(e)));
        }
      });
    });
    req.end(payload);
  });
}

async function fnRows(node: BenchNode): Promise<Row[]> {
  const w = node.client;
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const sandboxFusion = async (): Promise<void> => {
    const r = await runCode(node, agent, { code: 'print(1)', language: 'python' });
    if (r.status !== 'Success' || r.run_result?.stdout !== '1\n') throw new Error(`unexpected answer: ${JSON.stringify(r)}`);
  };
  const check = (r: { exitCode: number | null; stdout: string }, want: string): void => {
    if (r.exitCode !== 0 || r.stdout !== want) throw new Error(`unexpected result: ${JSON.stringify(r)}`);
  };
  // Warm: every worker up, its zygote started.
  await pool(WORKERS * 8, CONCURRENCY, async () => check(await w.fn.run({ language: 'python', code: 'print(1)' }), '1\n'));
  await pool(WORKERS * 8, CONCURRENCY, async () => check(await w.fn.run({ language: 'bash', code: 'echo 1' }), '1\n'));
  const rows = [
    await measure(`FnCall python print(1)`, CALLS, async () => check(await w.fn.run({ language: 'python', code: 'print(1)' }), '1\n')),
    await measure(`FnCall bash echo`, CALLS, async () => check(await w.fn.run({ language: 'bash', code: 'echo 1' }), '1\n')),
    await measure(`SandboxFusion run_code python print(1)`, CALLS, sandboxFusion),
  ];
  for (const rate of [100, 200]) {
    rows.push(
      await paced(`FnCall python print(1), paced at ${rate}/s`, rate, Math.min(CALLS, rate * 10), CONCURRENCY, async () =>
        check(await w.fn.run({ language: 'python', code: 'print(1)' }), '1\n'),
      ),
    );
  }
  const batch = Array.from({ length: 100 }, () => ({ language: 'python' as const, code: 'print(1)' }));
  rows.push(
    await measure(`FnCall python print(1), batches of 100`, Math.max(4, Math.round(CALLS / 100)), async () => {
      const rs = await w.fn.batch(batch);
      for (const r of rs) if ('error' in r) throw new Error(r.error.message);
    }).then((r) => ({ ...r, name: r.name, perSec: r.perSec * 100, cpuMsPerCall: r.cpuMsPerCall === null ? null : r.cpuMsPerCall / 100 })),
  );
  agent.destroy();
  return rows;
}

async function freshSandboxRow(w: Warren, total: number): Promise<Row> {
  return measure('fresh sandbox per call (create+exec+delete)', total, async () => {
    const sb = await w.sandboxes.create({ image: 'debian-python:latest', resources: { cpu: 0.05, memoryMiB: 128 } });
    try {
      const r = await sb.exec(['python3', '-c', 'print(1)']);
      if (r.stdout !== '1\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`);
    } finally {
      await sb.delete();
    }
  });
}

/** `podman run --rm` of the same Debian + Python root per call; null without podman. */
async function podmanRow(total: number): Promise<Row | null> {
  if (spawnSync('podman', ['--version']).status !== 0) return null;
  const meta = join(IMAGE_CACHE, 'debian-python.v3.erofs');
  if (!existsSync(meta)) return null;
  const dir = await mkdtemp('/tmp/warren-bench-fn-');
  const root = join(dir, 'root');
  const image = 'localhost/warren-bench-debian-python:latest';
  const hostd = new HostHelper(HOSTD);
  let mounted = false;
  try {
    await mkdir(root);
    await hostd.erofs(meta, root, join(IMAGE_CACHE, 'debian-python.v3.data'));
    mounted = true;
    const tar = spawnSync('tar', ['-C', root, '-c', '.'], { maxBuffer: 1024 * 1024 * 1024 });
    const imp = spawnSync('podman', ['import', '-', image], { input: tar.stdout });
    if (imp.status !== 0) throw new Error(`podman import failed: ${imp.stderr.toString()}`);
    const args = ['run', '--rm', ...PODMAN_FLAGS, image, 'python3', '-c', 'print(1)'];
    await run('podman', args);
    return await measure('podman run --rm python3 -c print(1)', total, async () => {
      const { stdout } = await run('podman', args, { timeout: 120_000 });
      if (stdout !== '1\n') throw new Error(`unexpected output ${JSON.stringify(stdout)}`);
    });
  } finally {
    spawnSync('podman', ['rmi', '-f', image], { stdio: 'ignore' });
    if (mounted) await hostd.umount(root).catch(() => undefined);
    await hostd.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const dataDir = await mkdtemp('/tmp/warren-bench-fn-data-');
  const node = await startWarrenUp(dataDir, ['--no-network', '--fn-pool', `debian-python:latest:python=${WORKERS}`, '--fn-max-workers', String(WORKERS)], {
    logs: process.env.FN_LOGS === '1',
  });
  try {
    console.log(
      `FnCall benchmark: ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), ${CONCURRENCY} concurrent clients, ${WORKERS} workers, ${CALLS} calls per row`,
    );
    const rows = await fnRows(node);
    for (const r of rows) console.log(line(r));
    const fresh = await freshSandboxRow(node.client, Math.min(300, CALLS));
    console.log(line(fresh));
    const pod = await podmanRow(Math.min(64, CALLS));
    console.log(pod ? line(pod) : 'podman run --rm: podman is not installed (scripts/bench-setup.sh installs it)');
    const py = rows[0]!;
    const sf = rows[2]!;
    console.log(
      `\nSandboxFusion run_code vs FnCall (Python, closed loop): ${((sf.perSec / py.perSec) * 100).toFixed(1)} % of its calls/s, p50 ${(sf.p50 / py.p50).toFixed(2)}x`,
    );
    console.log(
      `Python FnCall vs fresh sandbox: ${(py.perSec / fresh.perSec).toFixed(1)}x; vs podman run --rm: ${pod ? `${(py.perSec / pod.perSec).toFixed(1)}x` : 'n/a'}`,
    );
  } finally {
    await node.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
