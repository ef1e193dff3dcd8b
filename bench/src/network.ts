// Warren benchmark: what sandbox networking costs. Create latency with networking off and on
// (steady: one create at a time; burst: faster than the pool refills), and the throughput of a
// download through the egress proxy vs a direct (CIDR-allowed) one vs the host itself, from a
// server in a network namespace of the benchmark's own; and the API's latency while a sandbox
// floods DNS, with the node's per-sandbox DNS rate and without one. Prints numbers; asserts nothing.
// Usage: npm run bench:network [-- --creates 100 --burst 48 --mib 512 --flood-seconds 8 --only create,download,dns]
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
    'flood-seconds': { type: 'string', default: '8' },
    only: { type: 'string', default: 'create,download,dns' },
  },
});
const FLOOD_SECONDS = Number(values['flood-seconds']);
const ONLY = new Set(values.only.split(','));
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

/** Sends DNS queries from one socket as fast as it can for the seconds given; prints how many. */
const DNS_FLOOD = String.raw`
import socket, struct, sys, time
q = struct.pack('>HHHHHH', 1, 0x0100, 1, 0, 0, 0) + b'\x05flood\x07example\x00' + struct.pack('>HH', 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
n = 0; end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(256):
        try: s.sendto(q, ('192.0.2.53', 53)); n += 1
        except BlockingIOError: pass
    try:
        while True: s.recv(512)
    except BlockingIOError: pass
print(n)
`;

/** GET of a sandbox, one after another for `seconds`: the API's latency as a caller sees it. */
async function apiLatency(sb: Sandbox, seconds: number): Promise<number[]> {
  const out: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t = performance.now();
    await sb.refresh();
    out.push(performance.now() - t);
  }
  return out;
}

/** The API's latency alone, then while another sandbox floods DNS; on a node with `args`. */
async function underDnsFlood(dir: string, args: string[]): Promise<{ quiet: number[]; flood: number[]; sent: number; answered: number }> {
  const node = await startWarrenUp(dir, ['--images', 'debian-python:latest', ...args]);
  try {
    const [noisy, watched] = await Promise.all(
      [0, 1].map(() => node.client.sandboxes.create({ image: 'debian-python:latest', network: { egress: 'deny', allow: ['flood.example'] } })),
    );
    await noisy!.files.write('/tmp/flood.py', DNS_FLOOD);
    const quiet = await apiLatency(watched!, FLOOD_SECONDS / 2);
    const flooding = noisy!.exec(['python3', '/tmp/flood.py', String(FLOOD_SECONDS + 1)], { timeoutMs: 120_000 });
    await new Promise((r) => setTimeout(r, 500));
    const flood = await apiLatency(watched!, FLOOD_SECONDS);
    const sent = Number((await flooding).stdout.trim());
    await new Promise((r) => setTimeout(r, 1100));
    const usage = (await noisy!.refresh()).network.usage;
    await Promise.all([noisy!.delete(), watched!.delete()]);
    return { quiet, flood, sent, answered: sent - (usage.denied['(DNS rate limit)'] ?? 0) };
  } finally {
    await node.stop();
  }
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

    if (ONLY.has('create')) await creates(dirs);
    if (ONLY.has('download')) await downloads(dirs, server);
    if (ONLY.has('dns')) await dnsFlood(dirs);
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

/** Create latency, networking off, then on. */
async function creates(dirs: string[]): Promise<void> {
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
}

/** Downloads: through the proxy by name, directly by a CIDR rule, and from the host. */
async function downloads(dirs: string[], server: string): Promise<void> {
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
}

/** The API while a sandbox floods DNS: the node's default rate, and (nearly) none. */
async function dnsFlood(dirs: string[]): Promise<void> {
  const p = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(2)} ms, p99 ${pct(xs, 99).toFixed(2)} ms (${xs.length} calls)`;
  for (const [label, args] of [
    ['default DNS rate (1000/s a sandbox)', []],
    ['no DNS rate (--dns-rate 100000000)', ['--dns-rate', '100000000']],
  ] as const) {
    const d = await mkdtemp(join(tmpdir(), 'warren-bench-net-'));
    dirs.push(d);
    const r = await underDnsFlood(d, [...args]);
    console.log(
      `API GET of a sandbox, ${label}: alone ${p(r.quiet)}; while another floods DNS (${(r.sent / FLOOD_SECONDS / 1000).toFixed(0)}k queries/s sent, ${r.answered} reached the node) ${p(r.flood)}; p99 ratio ${(pct(r.flood, 99) / pct(r.quiet, 99)).toFixed(2)}`,
    );
  }
}

await main();
