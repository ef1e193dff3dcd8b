// The idle-density benchmark: fills one node with idle sandboxes (each with a live shell session
// and a sleeping process: python3 on debian-python, sleep on busybox), pausing each once it is set
// up, until the target count, admission, the host's memory or the time bound stops it; then, at
// that count, measures what it costs (host memory per paused sandbox, by kind; Warren's own
// memory and files; the kernel's counts) and how fast the node still is: creates and resumes
// per second, pause and the first command on a paused sandbox, and GET /v1/sandboxes over all
// of them page by page. Prints numbers; asserts nothing. Used by idle.ts and density/idle.ts.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { WarrenError, type Sandbox, type Shell, type Warren } from '@warren/sdk';
import { hostCounts, meminfoKiB, processMemory, zramUsedBytes, type HostCounts } from './host-probe.js';
import { startWarrenUp } from './warren-up.js';
import { pct, pool, processCpuSeconds } from './stats.js';

/** What one run does. */
export interface IdleRunOptions {
  /** Sandboxes to reach. */
  max: number;
  image: string;
  /** Creates in flight while filling. */
  concurrency: number;
  zramMiB: number;
  /** Stop filling when the host has less available memory than this. */
  minFreeMiB: number;
  /** Sandboxes the pause/resume latencies are measured on (spread over the node). */
  sample: number;
  /** Creates made (and removed) at the count to measure the create rate there. */
  createsAtCount: number;
  /** Stop filling after this long. */
  maxFillSeconds: number;
  /** Also measure warm-pool claims. */
  pool: boolean;
  /** Print a line every this many sandboxes. */
  every: number;
  /** More `warren up` flags. */
  flags: string[];
  /**
   * Profile `warren up` into this directory: a CPU profile written when it stops (--cpu-prof),
   * and a heap snapshot whenever it gets SIGUSR2.
   */
  profileDir?: string;
}

const ms = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms`;
const mib = (b: number): string => `${(b / 2 ** 20).toFixed(2)} MiB`;
const sleep = (t: number): Promise<void> => new Promise((r) => setTimeout(r, t));

/** What the host and Warren hold at one moment (bytes, counts). */
interface Snapshot {
  meminfo: Record<string, number>;
  zramBytes: number;
  warren: ReturnType<typeof processMemory>;
  hostd: ReturnType<typeof processMemory>;
  counts: HostCounts;
}

function hostdPid(warrenPid: number): number {
  const kids = processChildren(warrenPid);
  return kids.find((p) => processComm(p) === 'warren-hostd') ?? 0;
}

function processChildren(pid: number): number[] {
  try {
    return readFileSyncList(`/proc/${pid}/task/${pid}/children`);
  } catch {
    return [];
  }
}

function readFileSyncList(path: string): number[] {
  return readText(path).trim().split(/\s+/).filter(Boolean).map(Number);
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
const processComm = (pid: number): string => readText(`/proc/${pid}/comm`).trim();

function snapshot(warrenPid: number, hostd: number, dataDir: string): Snapshot {
  return { meminfo: meminfoKiB(), zramBytes: zramUsedBytes(), warren: processMemory(warrenPid), hostd: processMemory(hostd), counts: hostCounts(dataDir) };
}

/** One box of the fill: the sandbox and its shell session. */
interface Box {
  sb: Sandbox;
  sh: Shell;
}

/** Runs the benchmark with `o`, printing as it goes. */
export async function runIdle(o: IdleRunOptions): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-idle-'));
  const nodeArgs = o.profileDir
    ? ['--cpu-prof', '--cpu-prof-interval=5000', `--cpu-prof-dir=${o.profileDir}`, '--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${o.profileDir}`]
    : [];
  const node = await startWarrenUp(dir, ['--zram-swap-mib', String(o.zramMiB), '--memory-floor-mib', '0', ...o.flags], { removeDataDir: true, nodeArgs });
  console.log(`data dir ${dir}, warren up pid ${node.pid}`);
  const c = node.client;
  const hostd = hostdPid(node.pid);
  const python = o.image.startsWith('debian-python');
  const idleCmd = python ? 'python3 -c "import time; time.sleep(10**6)" > /dev/null 2>&1 &' : 'sleep 1000000 > /dev/null 2>&1 &';
  const resources = { memoryMiB: python ? 256 : 64, cpu: python ? 0.5 : 0.1 };
  const boxes: Box[] = [];
  try {
    await sleep(1000);
    const start = snapshot(node.pid, hostd, dir);
    const fill = await fillNode(c, o, { image: o.image, idleCmd, resources }, boxes, () => snapshot(node.pid, hostd, dir), start);
    const n = boxes.length;
    const node1 = (await c.nodes()).nodes[0]!;
    console.log(`held ${n} idle paused ${o.image} sandboxes (each a shell session + a sleeping ${python ? 'python3' : 'sleep'}); stopped by ${fill.stop}`);
    console.log(
      `fill: ${fill.seconds.toFixed(0)} s, ${(n / fill.seconds).toFixed(1)} sandboxes/s (create + shell + command + pause, ${o.concurrency} in flight); create ${ms(fill.createMs)} overall, ${ms(fill.createMs.slice(-500))} for the last 500`,
    );
    console.log(
      `node: ${node1.sandboxes} sandboxes, ${node1.paused} paused; memory used ${node1.used.memoryMiB} MiB + ${node1.used.swapMiB} MiB in swap (uncompressed); committed ${node1.committed.memoryMiB} of ${node1.capacity.memoryMiB} MiB; sandboxes at most ${node1.capacity.sandboxes}`,
    );
    await sleep(3000); // the last page-outs
    reportMemory(start, snapshot(node.pid, hostd, dir), n, fill);
    await measureRest(c, node.pid, hostd, n);
    await measureList(c, n);
    await measureAtCount(c, o, boxes, { image: o.image, resources });
    if (o.pool) await measurePool(c);
  } finally {
    console.log(`stopping (removes every sandbox)...`);
    const t = performance.now();
    await node.stop();
    console.log(`stopped in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

interface FillResult {
  stop: string;
  seconds: number;
  createMs: number[];
  running: number[];
  paused: number[];
}

async function fillNode(
  c: Warren,
  o: IdleRunOptions,
  s: { image: string; idleCmd: string; resources: { memoryMiB: number; cpu: number } },
  boxes: Box[],
  snap: () => Snapshot,
  start: Snapshot,
): Promise<FillResult> {
  const r: FillResult = { stop: 'the target count', seconds: 0, createMs: [], running: [], paused: [] };
  const t0 = performance.now();
  let stopped = false;
  let started = 0;
  let lastLine = { at: t0, n: 0 };
  const end = (why: string): void => {
    if (!stopped) r.stop = why;
    stopped = true;
  };
  const one = async (k: number): Promise<void> => {
    let sb: Sandbox;
    const t = performance.now();
    try {
      sb = await c.sandboxes.create({ image: s.image, resources: s.resources, labels: { bench: 'idle' } });
    } catch (e) {
      if (e instanceof WarrenError && e.code === 'resource_exhausted') return end(`admission (${e.message})`);
      return end(`an error: ${e instanceof Error ? e.message : String(e)}`);
    }
    r.createMs.push(performance.now() - t);
    const sh = await sb.shell({ cwd: '/' });
    await sh.exec(s.idleCmd);
    const measure = k % 20 === 0;
    // Every 20th: let the process finish starting before its memory is read.
    await sleep(measure ? 500 : 30);
    const before = measure ? await sb.refresh() : null;
    await sb.pause();
    if (before) {
      // A pause answers before its page-out: the memory is read once that is done (≤ 1 s).
      let after = await sb.refresh();
      for (const e = performance.now() + 1000; after.usage.memoryBytes > before.usage.memoryBytes / 2 && performance.now() < e; ) {
        await sleep(20);
        after = await sb.refresh();
      }
      r.running.push(before.usage.memoryBytes);
      r.paused.push(after.usage.memoryBytes);
    }
    boxes.push({ sb, sh });
  };
  const worker = async (): Promise<void> => {
    while (!stopped && started < o.max) {
      if (started % 50 === 0 && meminfoKiB().MemAvailable! / 1024 < o.minFreeMiB) return end(`the host's available memory (< ${o.minFreeMiB} MiB)`);
      if (performance.now() - t0 > o.maxFillSeconds * 1000) return end(`the time bound (${o.maxFillSeconds} s)`);
      const k = started++;
      try {
        await one(k);
      } catch (e) {
        end(`an error: ${e instanceof Error ? e.message : String(e)}`);
      }
      if (boxes.length >= lastLine.n + o.every) {
        const now = performance.now();
        const prev = lastLine;
        lastLine = { at: now, n: boxes.length };
        const api = performance.now();
        await c.nodes();
        const nodesMs = performance.now() - api;
        const sn = snap();
        const perBox = boxes.length || 1;
        console.log(
          `  ${boxes.length}: ${((now - t0) / 1000).toFixed(0)} s, ${(((boxes.length - prev.n) / (now - prev.at)) * 1000).toFixed(1)}/s, create ${ms(r.createMs.slice(-o.every))}; ` +
            `host available ${(sn.meminfo.MemAvailable! / 1024).toFixed(0)} MiB (${mib(((start.meminfo.MemAvailable! - sn.meminfo.MemAvailable!) * 1024) / perBox)}/box); ` +
            `Warren rss ${mib(sn.warren.rssBytes)} (${mib((sn.warren.rssBytes - start.warren.rssBytes) / perBox)}/box), ${sn.warren.fds} files, ${sn.warren.threads} threads; hostd ${mib(sn.hostd.rssBytes)}; ` +
            `tasks ${sn.counts.tasks}/${sn.counts.pidMax}, mounts ${sn.counts.mounts}, memory cgroups ${sn.counts.memoryCgroups}, interfaces ${sn.counts.interfaces}, inodes ${sn.counts.inodesUsed}; GET /v1/nodes ${nodesMs.toFixed(0)} ms`,
        );
      }
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, worker));
  r.seconds = (performance.now() - t0) / 1000;
  return r;
}

function reportMemory(a: Snapshot, b: Snapshot, n: number, fill: FillResult): void {
  const per = (kib: (s: Snapshot) => number): string => mib(((kib(b) - kib(a)) * 1024) / Math.max(1, n));
  const m = (k: string) => (s: Snapshot) => s.meminfo[k] ?? 0;
  const swapUsed = (s: Snapshot): number => (s.meminfo.SwapTotal ?? 0) - (s.meminfo.SwapFree ?? 0);
  console.log(
    `memory per paused sandbox, host: available fell by ${per((s) => -(s.meminfo.MemAvailable ?? 0))} ` +
      `(anon ${per(m('AnonPages'))}, page cache ${per(m('Cached'))}, slab unreclaimable ${per(m('SUnreclaim'))}, reclaimable ${per(m('SReclaimable'))}, ` +
      `kernel stacks ${per(m('KernelStack'))}, page tables ${per(m('PageTables'))}, zram ${mib((b.zramBytes - a.zramBytes) / Math.max(1, n))} holding ${per(swapUsed)} of swap)`,
  );
  console.log(
    `  Warren's own: its process ${mib((b.warren.rssBytes - a.warren.rssBytes) / Math.max(1, n))} (anon ${mib((b.warren.anonBytes - a.warren.anonBytes) / Math.max(1, n))}; ${mib(b.warren.rssBytes)} in all, ${b.warren.fds} open files), ` +
      `warren-hostd ${mib((b.hostd.rssBytes - a.hostd.rssBytes) / Math.max(1, n))} (${b.hostd.fds} open files)`,
  );
  console.log(`  a sandbox's cgroup (median of every 20th): running ${mib(pct(fill.running, 50))}, paused ${mib(pct(fill.paused, 50))} (the rest in swap)`);
  const d = (k: keyof HostCounts): number => b.counts[k] - a.counts[k];
  console.log(
    `  kernel counts: tasks +${d('tasks')} (${b.counts.tasks} of pid_max ${b.counts.pidMax}), mounts +${d('mounts')} (${b.counts.mounts}; mount-max ${b.counts.mountMax} per namespace), ` +
      `memory cgroups +${d('memoryCgroups')}, network interfaces +${d('interfaces')}, inodes +${d('inodesUsed')} (of ${b.counts.inodesTotal})`,
  );
}

/** Warren's CPU with the node at rest (its sweeps over every sandbox), and how late a call is answered meanwhile. */
async function measureRest(c: Warren, warrenPid: number, hostd: number, n: number): Promise<void> {
  const cpu0 = processCpuSeconds(warrenPid) + processCpuSeconds(hostd);
  const t0 = performance.now();
  const health: number[] = [];
  while (performance.now() - t0 < 10_000) {
    const t = performance.now();
    await c.nodes();
    health.push(performance.now() - t);
    await sleep(100);
  }
  const cores = (processCpuSeconds(warrenPid) + processCpuSeconds(hostd) - cpu0) / ((performance.now() - t0) / 1000);
  console.log(`at rest with ${n} sandboxes: Warren and warren-hostd use ${(cores * 100).toFixed(1)} % of a core; GET /v1/nodes meanwhile ${ms(health)}`);
}

/** GET /v1/sandboxes over every sandbox, 100 and 1,000 a page, twice each. */
async function measureList(c: Warren, n: number): Promise<void> {
  for (const limit of [100, 1000]) {
    const pages: number[] = [];
    const walks: number[] = [];
    let seen = 0;
    for (let walk = 0; walk < 2; walk++) {
      let cursor: string | undefined;
      seen = 0;
      const w = performance.now();
      do {
        const t = performance.now();
        const r = await c.sandboxes.list({ limit, cursor, labels: { bench: 'idle' } });
        pages.push(performance.now() - t);
        seen += r.sandboxes.length;
        cursor = r.nextCursor ?? undefined;
      } while (cursor);
      walks.push(performance.now() - w);
    }
    console.log(
      `GET /v1/sandboxes, ${limit} a page, ${seen} listed (of ${n}): a page ${ms(pages)}; all ${Math.ceil(seen / limit)} pages ${walks.map((x) => x.toFixed(0)).join(' / ')} ms`,
    );
  }
  const paused: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    await c.sandboxes.list({ limit: 100, state: 'paused' });
    paused.push(performance.now() - t);
  }
  console.log(`GET /v1/sandboxes?state=paused&limit=100 (state read from the node for every row): ${ms(paused)}`);
}

/** Pause, resume, the first command and creates at the count reached. */
async function measureAtCount(c: Warren, o: IdleRunOptions, boxes: Box[], s: { image: string; resources: { memoryMiB: number; cpu: number } }): Promise<void> {
  const step = Math.max(1, Math.floor(boxes.length / o.sample));
  const sample = boxes.filter((_, i) => i % step === 0).slice(0, o.sample);
  const resume: number[] = [];
  const pause: number[] = [];
  const first: number[] = [];
  for (const { sb } of sample) {
    let t = performance.now();
    await sb.resume();
    resume.push(performance.now() - t);
    t = performance.now();
    await sb.pause();
    pause.push(performance.now() - t);
  }
  for (const { sb, sh } of sample) {
    const t = performance.now();
    await sh.exec('echo hi');
    first.push(performance.now() - t);
    await sb.pause();
  }
  console.log(`at ${boxes.length}: pause answered (freeze; the page-out follows in the background), a woken sandbox: ${ms(pause)}`);
  console.log(`at ${boxes.length}: resume, one at a time: ${ms(resume)}`);
  console.log(`at ${boxes.length}: first command on a paused sandbox (transparent resume, shell session): ${ms(first)}`);
  const burst = await pool(sample.length, 8, (i) => sample[i]!.sb.resume());
  console.log(`at ${boxes.length}: resume, 8 in flight: ${((sample.length / burst.wallMs) * 1000).toFixed(0)} resumes/s (${ms(burst.latencies)})`);
  await pool(sample.length, 8, (i) => sample[i]!.sb.pause());
  const made = await pool(o.createsAtCount, 8, () => c.sandboxes.create({ image: s.image, resources: s.resources }));
  console.log(
    `at ${boxes.length}: create, 8 in flight: ${((o.createsAtCount / made.wallMs) * 1000).toFixed(1)} creates/s (${ms(made.latencies)}); one at a time: ${await createOneByOne(c, s)}`,
  );
  await pool(made.results.length, 8, (i) => made.results[i]!.delete());
}

async function createOneByOne(c: Warren, s: { image: string; resources: { memoryMiB: number; cpu: number } }): Promise<string> {
  const xs: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t = performance.now();
    const sb = await c.sandboxes.create({ image: s.image, resources: s.resources });
    xs.push(performance.now() - t);
    await sb.delete();
  }
  return ms(xs);
}

async function measurePool(c: Warren): Promise<void> {
  const p = await c.pools.create({ image: 'busybox:latest', resources: { memoryMiB: 64, cpu: 0.1 }, size: 100 });
  for (let i = 0; i < 600 && (await c.pools.list()).find((x) => x.id === p.id)!.ready < 100; i++) await sleep(100);
  const claimOne: number[] = [];
  const claimed: Sandbox[] = [];
  for (let i = 0; i < 30; i++) {
    const t = performance.now();
    claimed.push(await c.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 64, cpu: 0.1 } }));
    claimOne.push(performance.now() - t);
  }
  const burst = await pool(60, 16, () => c.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 64, cpu: 0.1 } }));
  claimed.push(...burst.results);
  const stats = (await c.pools.list()).find((x) => x.id === p.id)!;
  console.log(
    `warm pool claim, one at a time: ${ms(claimOne)}; 60 claims with 16 in flight: ${((60 / burst.wallMs) * 1000).toFixed(0)} claims/s (${stats.claims} claims)`,
  );
  await c.pools.delete(p.id);
  for (const sb of claimed) await sb.delete();
}
