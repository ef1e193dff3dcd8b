// Warren benchmark: what sandbox networking costs. Create latency with networking off and on
// (steady: one create at a time; burst: faster than the pool refills), and the throughput of a
// download through the egress proxy vs a direct (CIDR-allowed) one vs the host itself, from a
// server in a network namespace of the benchmark's own. Prints numbers; asserts nothing.
// Usage: npm run bench:network [-- --creates 100 --burst 48 --mib 512]
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Sandbox, Warren } from '@warren/sdk';
import { startWarrenUp } from './warren-up.js';
import { pct } from './stats.js';

const { values } = parseArgs({
  options: {
    creates: { type: 'string', default: '100' },
    burst: { type: 'string', default: '48' },
    mib: { type: 'string', default: '512' },
  },
});
const CREATES = Number(values.creates);
const BURST = Number(values.burst);
const MIB = Number(values.mib);

const ms = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(1)} ms, p95 ${pct(xs, 95).toFixed(1)} ms`;

/** Creates one at a time (each deleted after), then a burst kept alive until the end. */
async function createLatency(c: Warren, network: unknown): Promise<{ steady: number[]; burst: number[] }> {
  const create = async (): Promise<{ ms: number; sb: Sandbox }> => {
    const t = performance.now();
    const sb = await c.sandboxes.create({ image: 'busybox:latest', network: network as never, resources: { cpu: 0.05, memoryMiB: 64 } });
    return { ms: performance.now() - t, sb };
  };
  // Warm-up: images mounted, first pool filled.
  for (let i = 0; i < 5; i++) await (await create()).sb.delete();
  await new Promise((r) => setTimeout(r, 1000));
  const steady: number[] = [];
  for (let i = 0; i < CREATES; i++) {
    const r = await create();
    steady.push(r.ms);
    await r.sb.delete();
    // A pause like an agent's between episodes lets the pool refill, as it would in use.
    await new Promise((res) => setTimeout(res, 20));
  }
  const burst: number[] = [];
  const kept: Sandbox[] = [];
  for (let i = 0; i < BURST; i++) {
    const r = await create();
    burst.push(r.ms);
    kept.push(r.sb);
  }
  for (const sb of kept) await sb.delete();
  return { steady, burst };
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const tag = String(process.pid % 200);
  const ns = `wbench${tag}`;
  const hostIf = `wb${tag}`;
  const server = `10.252.${tag}.2`;
  const dirs: string[] = [];
  let srv: ChildProcess | null = null;
  try {
    execFileSync('sh', [
      '-c',
      `ip netns add ${ns} && ip link add ${hostIf} type veth peer name eth0 netns ${ns} && ip addr add 10.252.${tag}.1/30 dev ${hostIf} && ip link set ${hostIf} up && ` +
        `ip -n ${ns} addr add ${server}/30 dev eth0 && ip -n ${ns} link set eth0 up && ip -n ${ns} link set lo up && ip -n ${ns} route add default via 10.252.${tag}.1`,
    ]);
    const serve = `const b=Buffer.alloc(1<<20);require('http').createServer((q,r)=>{let n=Number(new URL(q.url,'http://x').searchParams.get('mib')||1);r.writeHead(200,{'content-length':n<<20});const w=()=>{while(n>0){n--;if(!r.write(b))return r.once('drain',w)}r.end()};w()}).listen(80)`;
    srv = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', serve], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 500));

    // Create latency, networking off, then on.
    const results: Record<string, { steady: number[]; burst: number[] }> = {};
    for (const mode of ['off', 'on'] as const) {
      const dir = await mkdtemp(join(tmpdir(), 'warren-bench-net-'));
      dirs.push(dir);
      const node = await startWarrenUp(dir, mode === 'off' ? ['--no-network', '--images', 'busybox:latest'] : ['--images', 'busybox:latest']);
      try {
        results[mode] = await createLatency(node.client, mode === 'off' ? undefined : { egress: 'deny', allow: ['download.example'] });
      } finally {
        await node.stop();
      }
      console.log(`create, networking ${mode}: steady ${ms(results[mode].steady)} (${CREATES}); burst of ${BURST}: ${ms(results[mode].burst)}`);
    }
    const added = pct(results.on!.steady, 50) - pct(results.off!.steady, 50);
    console.log(
      `networking adds ${added.toFixed(1)} ms to create p50 (steady), ${(pct(results.on!.burst, 50) - pct(results.off!.burst, 50)).toFixed(1)} ms in a burst`,
    );

    // Downloads: through the proxy by name, directly by a CIDR rule, and from the host.
    const dir = await mkdtemp(join(tmpdir(), 'warren-bench-net-'));
    dirs.push(dir);
    await writeFile(join(dir, 'hosts'), `${server} download.example\n`);
    const node = await startWarrenUp(dir, ['--egress-hosts', join(dir, 'hosts'), '--images', 'busybox:latest']);
    try {
      const sb = await node.client.sandboxes.create({ image: 'busybox:latest', network: { egress: 'deny', allow: ['download.example', `${server}/32`] } });
      const rate = async (url: string): Promise<number> => {
        const runs: number[] = [];
        for (let i = 0; i < 3; i++) {
          const t = performance.now();
          const r = await sb.exec(['wget', '-q', '-O', '/dev/null', url], { timeoutMs: 300_000 });
          if (r.exitCode !== 0) throw new Error(`wget ${url}: ${r.stderr}`);
          runs.push(MIB / ((performance.now() - t) / 1000));
        }
        return pct(runs, 50);
      };
      const proxied = await rate(`http://download.example/?mib=${MIB}`);
      const direct = await rate(`http://${server}/?mib=${MIB}`);
      const hostRuns: number[] = [];
      for (let i = 0; i < 3; i++) {
        const t = performance.now();
        execFileSync('busybox', ['wget', '-q', '-O', '/dev/null', `http://${server}/?mib=${MIB}`]);
        hostRuns.push(MIB / ((performance.now() - t) / 1000));
      }
      const host = pct(hostRuns, 50);
      console.log(
        `download of ${MIB} MiB (busybox wget, median of 3): through the proxy ${proxied.toFixed(0)} MiB/s, direct ${direct.toFixed(0)} MiB/s, from the host ${host.toFixed(0)} MiB/s; proxy/direct ${(proxied / direct).toFixed(2)}`,
      );
      await sb.delete();
    } finally {
      await node.stop();
    }
  } finally {
    srv?.kill('SIGKILL');
    try {
      execFileSync('sh', ['-c', `ip link del ${hostIf}; ip netns del ${ns}`], { stdio: 'ignore' });
    } catch {
      /* gone */
    }
    for (const d of dirs) await rm(d, { recursive: true, force: true }).catch(() => undefined);
  }
}

await main();
