// Warren benchmark: create latency and throughput, exec round trips, idle memory per sandbox,
// against raw runc and podman in the same run. Prints numbers; asserts nothing.
// Usage: npm run bench [-- --idle 500 --creates 200]
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile } from 'node:fs/promises';
import { chmodSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { Warren, type Sandbox } from '@warren/sdk';
import { podman, rawRunc } from './baselines.js';
import { startWarrenUp } from './warren-up.js';
import { fmt, pct, pool } from './stats.js';

const { values } = parseArgs({
  options: {
    idle: { type: 'string', default: '500' },
    creates: { type: 'string', default: '200' },
    latency: { type: 'string', default: '50' },
    execs: { type: 'string', default: '1000' },
  },
});
const IDLE = Number(values.idle);
const CREATES = Number(values.creates);
const LATENCY_N = Number(values.latency);
const EXECS = Number(values.execs);

async function memAvailable(): Promise<number> {
  const m = /MemAvailable:\s+(\d+) kB/.exec(await readFile('/proc/meminfo', 'utf8'));
  return Number(m?.[1] ?? 0) * 1024;
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dataDir = await mkdtemp('/tmp/warren-bench-');
  chmodSync(dataDir, 0o711);
  const srv = await startWarrenUp(dataDir, [], { logs: true });
  const w = new Warren({ url: srv.url, apiKey: srv.key });
  const made: Sandbox[] = [];
  let warrenRate = 0;
  const cleanup = async (): Promise<void> => {
    await pool(made.length, 8, (i) => made[i]?.delete().catch(() => undefined) ?? Promise.resolve());
    made.length = 0;
  };
  // Small requests: the node admits CPUs x 10 and memory x 1.5 of what it has, and these
  // benchmarks keep hundreds of sandboxes alive at once.
  const small = { cpu: 0.01, memoryMiB: 32 };
  try {
    // Warm the layer mounts once per image.
    for (const image of ['busybox:latest', 'debian-python:latest']) made.push(await w.sandboxes.create({ image }));
    await cleanup();

    for (const image of ['busybox:latest', 'debian-python:latest']) {
      const lat: number[] = [];
      for (let i = 0; i < LATENCY_N; i++) {
        const s = performance.now();
        made.push(await w.sandboxes.create({ image, resources: small }));
        lat.push(performance.now() - s);
      }
      console.log(`create ${image} (sequential, n=${LATENCY_N}): p50 ${fmt(pct(lat, 50))}  p99 ${fmt(pct(lat, 99))}`);
      await cleanup();
    }

    const sustained = await pool(CREATES, 16, async () => made.push(await w.sandboxes.create({ image: 'busybox:latest', resources: small })));
    warrenRate = (CREATES / sustained.wallMs) * 1000;
    console.log(
      `create busybox, 16 concurrent clients, n=${CREATES}: ${warrenRate.toFixed(1)} creates/s (p50 ${fmt(pct(sustained.latencies, 50))}, p99 ${fmt(pct(sustained.latencies, 99))})`,
    );
    await cleanup();

    const sb = await w.sandboxes.create({ image: 'debian-python:latest' });
    made.push(sb);
    const sh = await sb.shell();
    for (let i = 0; i < 20; i++) await sh.exec('true');
    const sess: number[] = [];
    for (let i = 0; i < EXECS; i++) {
      const s = performance.now();
      await sh.exec('true');
      sess.push(performance.now() - s);
    }
    console.log(`exec 'true' on a warm session (n=${EXECS}): p50 ${fmt(pct(sess, 50))}  p99 ${fmt(pct(sess, 99))}`);
    const fresh: number[] = [];
    for (let i = 0; i < EXECS / 2; i++) {
      const s = performance.now();
      await sb.exec(['true']);
      fresh.push(performance.now() - s);
    }
    console.log(`exec ['true'] as a fresh command (n=${EXECS / 2}): p50 ${fmt(pct(fresh, 50))}  p99 ${fmt(pct(fresh, 99))}`);
    const files: number[] = [];
    for (let i = 0; i < EXECS / 2; i++) {
      const s = performance.now();
      await sb.files.write('/tmp/f', 'x');
      await sb.files.read('/tmp/f');
      files.push(performance.now() - s);
    }
    console.log(`file write+read of 1 byte (n=${EXECS / 2}): p50 ${fmt(pct(files, 50))}  p99 ${fmt(pct(files, 99))}`);
    await cleanup();

    const before = await memAvailable();
    await pool(IDLE, 16, async () => made.push(await w.sandboxes.create({ image: 'busybox:latest', resources: small })));
    await new Promise((r) => setTimeout(r, 2000));
    const after = await memAvailable();
    const cg = await Promise.all(made.slice(0, 50).map((s) => s.refresh()));
    const cgAvg = cg.reduce((a, s) => a + s.usage.memoryBytes, 0) / cg.length;
    console.log(
      `idle busybox sandboxes: ${IDLE} alive; node memory used ${((before - after) / 2 ** 20).toFixed(0)} MiB = ${((before - after) / IDLE / 2 ** 20).toFixed(2)} MiB per sandbox (cgroup average ${(cgAvg / 2 ** 20).toFixed(2)} MiB)`,
    );
    await cleanup();
  } finally {
    await cleanup();
    await srv.stop();
    spawnSync('rm', ['-rf', dataDir]);
  }

  const rawN = Math.min(CREATES, 200);
  const raw = await rawRunc(rawN, 16);
  console.log(`raw runc run -d, 16 concurrent, n=${rawN}: ${raw.perSec.toFixed(1)} creates/s (p50 ${fmt(pct(raw.latencies, 50))})`);
  const pd = await podman(40, 4);
  if (pd) console.log(`podman run -d --runtime runc, 4 concurrent, n=40: ${pd.perSec.toFixed(1)} creates/s (p50 ${fmt(pct(pd.latencies, 50))})`);
  else console.log('podman: not installed (apt-get install podman), skipped');
  console.log(`ratios: Warren / raw runc = ${(warrenRate / raw.perSec).toFixed(2)}${pd ? `, Warren / podman = ${(warrenRate / pd.perSec).toFixed(1)}x` : ''}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
