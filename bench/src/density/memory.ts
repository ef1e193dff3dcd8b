// Warren density benchmark, memory: how many sandboxes a node takes now that admission counts
// memory requests (a quarter of the limit by default) against its memory plus what zram holds,
// and what happens when memory really runs out.
// 1. 100 busybox sandboxes created at once from one asyncio Python program (AsyncWarren, default
//    resources), on a node with defaults.
// 2. Beside them, 64 debian-python sandboxes (default resources, made 16 at a time by the TS SDK)
//    each holding 50 MB of random bytes in a background Python process, then idle.
// 3. The pressure run, on a second node whose sandboxes share a cgroup of --pressure-mib (the
//    machine stays healthy): idle debian-python sandboxes holding 50 MB, then busy busybox
//    sandboxes whose commands take 150 MiB each, until a create is refused.
// Prints numbers; asserts nothing. Usage: node bench/dist/density/memory.js [--busybox 100 --python 64 --pressure-mib 2048]
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { WarrenError, type Sandbox, type Warren } from '@warren/sdk';
import { startWarrenUp } from '../warren-up.js';
import { pool } from '../stats.js';

const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const DRIVE = fileURLToPath(new URL('../../py/density_memory.py', import.meta.url));
const MiB = 2 ** 20;

const memAvailableMiB = async (): Promise<number> => Number(/MemAvailable:\s+(\d+) kB/.exec(await readFile('/proc/meminfo', 'utf8'))?.[1] ?? 0) / 1024;

/** Holds 50 MB of random bytes in a Python process that then sleeps (in the background: the sandbox is idle). */
const HOLD_50MB = `python3 -c 'import os, time; b = os.urandom(50 * 1000 * 1000); time.sleep(100000)' </dev/null >/dev/null 2>&1 &`;

/** Waits until `pred` holds, polling every 200 ms, for at most `ms`. */
async function until(pred: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 200));
  }
  return true;
}

const heldMiB = async (sb: Sandbox): Promise<number> => {
  const u = (await sb.refresh()).usage;
  return (u.memoryBytes + u.swapBytes) / MiB;
};

function asyncioCreates(url: string, key: string, n: number): Promise<{ created: number; refused: string[]; seconds: number; ids: string[] }> {
  return new Promise((resolve, reject) => {
    const p = spawn(PYTHON, [DRIVE, url, key, String(n)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('error', reject);
    p.on('exit', (code) =>
      code === 0
        ? resolve(JSON.parse(out) as { created: number; refused: string[]; seconds: number; ids: string[] })
        : reject(new Error(`density_memory.py exited ${code}`)),
    );
  });
}

async function nodeLine(c: Warren): Promise<string> {
  const n = (await c.nodes()).nodes[0]!;
  return `node: ${n.sandboxes} sandboxes (${n.paused} paused), committed ${n.committed.memoryMiB} of ${n.capacity.memoryMiB} MiB of requests, used ${n.used.memoryMiB} MiB + ${n.used.swapMiB} MiB in swap`;
}

/** Parts 1 and 2: a node with defaults. */
async function fit(nBusybox: number, nPython: number): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-density-memory-'));
  const node = await startWarrenUp(dir, []);
  const c = node.client;
  try {
    const avail0 = await memAvailableMiB();
    const py = await asyncioCreates(node.url, node.key, nBusybox);
    const busyboxes = await Promise.all(py.ids.map((id) => c.sandboxes.get(id)));
    const avail1 = await memAvailableMiB();
    console.log(`${nBusybox} busybox at once from one asyncio program (Python client, default resources: 512 MiB limit, 128 MiB request):`);
    console.log(`  created ${py.created} in ${py.seconds.toFixed(1)} s, refused ${py.refused.length}${py.refused[0] ? ` (first: ${py.refused[0]})` : ''}`);
    console.log(`  host memory each: ${((avail0 - avail1) / Math.max(1, py.created)).toFixed(1)} MiB (MemAvailable before and after)`);
    console.log(`  ${await nodeLine(c)}`);

    const pythons: Sandbox[] = [];
    const refused: string[] = [];
    const t0 = performance.now();
    await pool(nPython, 16, async () => {
      try {
        const sb = await c.sandboxes.create({ image: 'debian-python:latest', labels: { bench: 'density-memory' } });
        pythons.push(sb);
        await sb.exec(['sh', '-c', HOLD_50MB]);
      } catch (e) {
        refused.push(e instanceof WarrenError ? `${e.code}: ${e.message}` : String(e));
      }
    });
    const holding = await until(async () => (await Promise.all(pythons.map(heldMiB))).every((m) => m >= 50), 120_000);
    const avail2 = await memAvailableMiB();
    const each = await Promise.all(pythons.map(heldMiB));
    console.log(`${nPython} debian-python beside them, each holding 50 MB (random bytes) and idle (TS SDK, 16 at a time, default resources):`);
    console.log(
      `  created ${pythons.length} in ${((performance.now() - t0) / 1000).toFixed(1)} s, refused ${refused.length}${refused[0] ? ` (first: ${refused[0]})` : ''}; all holding: ${holding}`,
    );
    console.log(
      `  host memory each: ${((avail1 - avail2) / Math.max(1, pythons.length)).toFixed(1)} MiB (MemAvailable); its cgroup: ${(each.reduce((a, b) => a + b, 0) / Math.max(1, each.length)).toFixed(1)} MiB (memory + swap)`,
    );
    const n = (await c.nodes()).nodes[0]!;
    console.log(`  ${await nodeLine(c)}; host available ${(await memAvailableMiB()).toFixed(0)} MiB`);
    console.log(`  room left by requests: ${Math.floor((n.capacity.memoryMiB - n.committed.memoryMiB) / 128)} more default sandboxes (128 MiB each)`);
    await pool(busyboxes.length + pythons.length, 32, async (i) => {
      await (i < busyboxes.length ? busyboxes[i]! : pythons[i - busyboxes.length]!).delete().catch(() => undefined);
    });
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Part 3: a node whose sandboxes share a cgroup of `limitMiB`, filled for real. */
async function pressure(limitMiB: number): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-density-pressure-'));
  const node = await startWarrenUp(dir, ['--sandbox-memory-mib', String(limitMiB)]);
  const c = node.client;
  const made: Sandbox[] = [];
  try {
    const n = (await c.nodes()).nodes[0]!;
    console.log(`pressure: a node whose sandboxes share a ${limitMiB} MiB cgroup (committable ${n.capacity.memoryMiB} MiB of requests):`);
    // Idle: a quarter of the limit in debian-python sandboxes holding 50 MB each.
    const idle: Sandbox[] = [];
    for (let i = 0; i < Math.floor(limitMiB / 4 / 60); i++) {
      const sb = await c.sandboxes.create({ image: 'debian-python:latest', resources: { memoryMiB: 256, memoryRequestMiB: 16 } });
      idle.push(sb);
      made.push(sb);
      await sb.exec(['sh', '-c', HOLD_50MB]);
    }
    await until(async () => (await Promise.all(idle.map(heldMiB))).every((m) => m >= 50), 60_000);
    // The load: busy sandboxes whose commands take 150 MiB each, 25 MiB every half second, until a create is refused.
    const busy: Sandbox[] = [];
    const runs: Array<Promise<unknown>> = [];
    let refusal = '';
    const t0 = performance.now();
    let pausedBeforeRefusal = 0;
    while (!refusal && busy.length < 64) {
      try {
        const sb = await c.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 256, memoryRequestMiB: 16 } });
        busy.push(sb);
        made.push(sb);
        runs.push(
          sb
            .exec(['sh', '-c', 'for i in 1 2 3 4 5 6; do dd if=/dev/zero bs=25M count=1 2>/dev/null | sleep 1000 & sleep 0.5; done; wait'], {
              timeoutMs: 600_000,
            })
            .catch((e: unknown) => e),
        );
        await until(async () => (await heldMiB(sb)) >= 145, 30_000);
      } catch (e) {
        refusal = e instanceof WarrenError ? `${e.code}: ${e.message}` : String(e);
        pausedBeforeRefusal = (await Promise.all(idle.map(async (sb) => (await sb.refresh()).state))).filter((s) => s === 'paused').length;
      }
    }
    const states = await Promise.all(busy.map(async (sb) => sb.refresh()));
    const swappedBusy = states.filter((s) => s.usage.swapBytes > 10 * MiB).length;
    const listed = new Set((await c.sandboxes.list({ limit: 1000 })).sandboxes.map((s) => s.id));
    console.log(
      `  ${idle.length} idle debian-python holding 50 MB, then ${busy.length} busy busybox taking 150 MiB each in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    console.log(`  idle ones paused when the create was refused: ${pausedBeforeRefusal} of ${idle.length}`);
    console.log(
      `  busy ones: ${states.filter((s) => s.state === 'running' && s.end === null).length} of ${busy.length} running, ${swappedBusy} with over 10 MiB in swap, ${states.filter((s) => s.end?.reason === 'oom').length} OOM-killed`,
    );
    console.log(`  refusal: ${refusal || 'none'}`);
    console.log(`  lost: ${made.filter((sb) => !listed.has(sb.id)).length} of ${made.length}; ${await nodeLine(c)}`);
    await pool(made.length, 16, async (i) => {
      await made[i]!.delete().catch(() => undefined);
    });
    await Promise.all(runs);
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Prints the memory section of the density benchmark. */
export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { busybox: { type: 'string', default: '100' }, python: { type: 'string', default: '64' }, 'pressure-mib': { type: 'string', default: '2048' } },
  });
  console.log(`## memory requests and pressure`);
  console.log(
    `machine: ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(1)} GiB, swap: ${(await readFile('/proc/swaps', 'utf8')).trim().split('\n').length - 1} device(s)`,
  );
  await fit(Number(values.busybox), Number(values.python));
  await pressure(Number(values['pressure-mib']));
}

if (import.meta.url === `file://${process.argv[1]}`) await run(process.argv.slice(2));
