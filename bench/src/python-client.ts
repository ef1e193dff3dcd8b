// What one client process drives: the Python client (AsyncWarren, one event loop) beside the
// TypeScript SDK doing the same, in the same run against the same node. Each creates N sandboxes,
// opens a shell session in each, then runs `true` commands over those warm sessions.
// Prints numbers; asserts nothing. Usage: npm run bench:python [-- --sandboxes 2000 --commands 10000]
import { spawn } from 'node:child_process';
import { chmodSync, existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Sandbox, Shell } from '@warren/sdk';
import { startWarrenUp } from './warren-up.js';
import { pool } from './stats.js';

const { values } = parseArgs({
  options: {
    sandboxes: { type: 'string', default: '2000' },
    commands: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '128' },
  },
});
const N = Number(values.sandboxes);
const COMMANDS = Number(values.commands);
const CONC = Number(values.concurrency);
const SMALL = { cpu: 0.01, memoryMiB: 16 };
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const DRIVE = fileURLToPath(new URL('../py/drive.py', import.meta.url));

interface Rates {
  createsPerS: number;
  commandsPerS: number;
  /** Calls per second of the client's own CPU: what it could drive were the node not the limit. */
  createsPerCpuS: number;
  commandsPerCpuS: number;
}

const cpuS = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

function python(url: string, key: string): Promise<Rates> {
  return new Promise((resolve, reject) => {
    const p = spawn(PYTHON, [DRIVE, url, key, String(N), String(COMMANDS), String(CONC)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as Rates) : reject(new Error(`drive.py exited ${code}`))));
  });
}

async function typescript(client: Awaited<ReturnType<typeof startWarrenUp>>['client']): Promise<Rates> {
  const sbs: Sandbox[] = new Array<Sandbox>(N);
  let t0 = performance.now();
  let c0 = cpuS();
  await pool(N, CONC, async (i) => {
    sbs[i] = await client.sandboxes.create({ image: 'busybox:latest', resources: SMALL, labels: { bench: 'ts' } });
  });
  const createS = (performance.now() - t0) / 1000;
  const createCpu = cpuS() - c0;
  const shells: Shell[] = new Array<Shell>(N);
  await pool(N, CONC, async (i) => {
    shells[i] = await sbs[i]!.shell();
  });
  t0 = performance.now();
  c0 = cpuS();
  // A session runs one command at a time: each task drives one session's share in turn.
  const per = Math.max(1, Math.floor(COMMANDS / N));
  await pool(N, CONC, async (i) => {
    for (let k = 0; k < per; k++) await shells[i]!.exec('true');
  });
  const execS = (performance.now() - t0) / 1000;
  const execCpu = cpuS() - c0;
  await pool(N, CONC, (i) => sbs[i]!.delete());
  return { createsPerS: N / createS, commandsPerS: (per * N) / execS, createsPerCpuS: N / createCpu, commandsPerCpuS: (per * N) / execCpu };
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  console.log(`${N} sandboxes (busybox, cpu 0.01, 16 MiB), ${COMMANDS} \`true\` commands over their warm sessions, ${CONC} calls in flight`);
  const dataDir = await mkdtemp('/tmp/warren-bench-python-');
  chmodSync(dataDir, 0o711);
  const srv = await startWarrenUp(dataDir, ['--images', 'busybox:latest']);
  try {
    // Warm the layer mounts, and the server's code (its JIT) on the paths measured: unwarmed, the
    // client measured first paid the server's warm-up.
    await (await srv.client.sandboxes.create({ image: 'busybox:latest' })).delete();
    await typescript(srv.client);
    const py = await python(srv.url, srv.key);
    const line = (r: Rates): string =>
      `${r.createsPerS.toFixed(0)} creates/s, ${r.commandsPerS.toFixed(0)} commands/s; per second of its own CPU: ${r.createsPerCpuS.toFixed(0)} creates, ${r.commandsPerCpuS.toFixed(0)} commands`;
    console.log(`Python AsyncWarren (one process): ${line(py)}`);
    const ts = await typescript(srv.client);
    console.log(`TypeScript SDK (one process):     ${line(ts)}`);
    console.log(`Python / TypeScript: creates ${(py.createsPerS / ts.createsPerS).toFixed(2)}×, commands ${(py.commandsPerS / ts.commandsPerS).toFixed(2)}×`);
  } finally {
    await srv.client.sandboxes.batch('delete', { bench: 'py' }).catch(() => undefined);
    await srv.client.sandboxes.batch('delete', { bench: 'ts' }).catch(() => undefined);
    await srv.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
