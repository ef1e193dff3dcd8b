// Warren benchmark: microVMs beside containers. Create to first command for a container, a
// microVM booted cold and a microVM cloned from its image's template; the memory an idle
// microVM holds (its QEMU's proportional set: a clone shares its template's pages); pause (the
// CPUs stopped), the save to disk, and resume from it with the first command after. Prints the
// accelerator QEMU used (TCG where /dev/kvm cannot run a guest), and what a microVM's network link
// costs a clone (the same on a node without the sandbox network). With --vm, full VMs too (the
// desktop image, built on first use): the first create (its boot, under systemd, with X) and
// creates from its template. Prints numbers; asserts nothing.
// Usage: npm run bench:microvm [-- --runs 5 --idle 4 --memory-mib 256 --vm]
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Warren, type Sandbox } from '@warren/sdk';
import { startWarren, type RunningWarren } from '@warren/server';
import { machineLine } from './side-by-side.js';
import { pct } from './stats.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    idle: { type: 'string', default: '4' },
    'memory-mib': { type: 'string', default: '256' },
    vm: { type: 'boolean', default: false },
  },
});
const RUNS = Number(values.runs);
const IDLE = Number(values.idle);
const MEMORY_MIB = Number(values['memory-mib']);
const IMAGE = 'busybox:latest';
const KEY = 'bench-key';
const quiet = { info: () => undefined, warn: () => undefined };

interface Node {
  warren: RunningWarren;
  client: Warren;
  dataDir: string;
}

async function node(snapshots: boolean, network = true, images = ['busybox:latest'], spares?: number): Promise<Node> {
  const dataDir = await mkdtemp(join(tmpdir(), 'warren-bench-microvm-'));
  await chmod(dataDir, 0o711);
  const warren = await startWarren({
    port: 0,
    host: '127.0.0.1',
    dataDir,
    imageCacheDir: process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images',
    adminKey: KEY,
    images: images as Array<'busybox:latest'>,
    memoryFloorMiB: 0,
    microvm: { snapshots, spares },
    network: network ? undefined : false,
    logger: quiet,
  });
  return { warren, client: new Warren({ url: warren.url, apiKey: KEY }), dataDir };
}

const line = (label: string, xs: number[]): string =>
  `  ${label.padEnd(44)} p50 ${pct(xs, 50).toFixed(0).padStart(5)} ms   max ${Math.max(...xs)
    .toFixed(0)
    .padStart(5)} ms   (${xs.length} runs)`;

/** On a node of its own: its template made by a first create, then the series; the node removed after. */
async function templateSeries(n: Node, label: string): Promise<void> {
  try {
    await (await createAndRun(n.client, 'microvm')).sb.delete();
    await series(n.client, 'microvm', label);
  } finally {
    await n.warren.close();
    await rm(n.dataDir, { recursive: true, force: true });
  }
}

/** The full VMs' image, and the memory each gets. */
const DESKTOP = 'debian-desktop:latest';
const VM_MEMORY_MIB = 1024;

/** Create, then the first command (`true`): both times, in ms. */
async function createAndRun(c: Warren, backend: 'container' | 'microvm' | 'vm'): Promise<{ sb: Sandbox; createMs: number; firstMs: number }> {
  const t0 = performance.now();
  const sb = await c.sandboxes.create(
    backend === 'vm' ? { image: DESKTOP, backend, resources: { memoryMiB: VM_MEMORY_MIB } } : { image: IMAGE, backend, resources: { memoryMiB: MEMORY_MIB } },
  );
  const createMs = performance.now() - t0;
  const r = await sb.exec('true');
  if (r.exitCode !== 0) throw new Error(`the first command failed: ${r.stderr}`);
  return { sb, createMs, firstMs: performance.now() - t0 };
}

async function series(c: Warren, backend: 'container' | 'microvm' | 'vm', label: string): Promise<void> {
  const create: number[] = [];
  const first: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    // One create at a time on a node left idle for a second before each (a spare QEMU is ready then).
    await new Promise((r) => setTimeout(r, 1000));
    const r = await createAndRun(c, backend);
    create.push(r.createMs);
    first.push(r.firstMs);
    await r.sb.delete();
  }
  console.log(line(`${label}: create`, create));
  console.log(line(`${label}: create to first command`, first));
}

async function main(): Promise<void> {
  console.log(machineLine());
  const warm = await node(true);
  const cold = await node(false);
  try {
    const info = (await (await fetch(`${warm.warren.url}/v1/info`, { headers: { authorization: `Bearer ${KEY}` } })).json()) as {
      backends: Array<{ name: string; available: boolean; accelerator: string | null }>;
    };
    const vm = info.backends.find((b) => b.name === 'microvm');
    if (!vm?.available) throw new Error('no microVM backend on this node: bash scripts/setup.sh installs QEMU and the guest kernel');
    console.log(`microVM accelerator: ${vm.accelerator}; guests of ${MEMORY_MIB} MiB, 1 vCPU, image ${IMAGE}`);

    console.log('create to first command (one at a time, the node idle for a second before each):');
    await series(warm.client, 'container', 'container');
    await series(cold.client, 'microvm', 'microVM, cold boot');
    const t0 = performance.now();
    const firstClone = await createAndRun(warm.client, 'microvm');
    console.log(`  microVM: the image's template made (one boot and save) and the first clone running: ${(performance.now() - t0).toFixed(0)} ms`);
    await firstClone.sb.delete();
    await series(warm.client, 'microvm', 'microVM, from its template');
    // What its link costs a create: the same on a node without the sandbox network (loopback only).
    await templateSeries(await node(true, false), 'microVM, from its template, no sandbox network');
    // A create that finds no spare ready (a burst of creates outruns them): QEMU is started and
    // the template's state loaded within the create, and the guest's first paths translated anew.
    await templateSeries(await node(true, true, ['busybox:latest'], 0), 'microVM, from its template, no spare ready');

    if (values.vm) await fullVms();

    // Idle memory: clones with a shell each, left alone a few seconds.
    const idle: Sandbox[] = [];
    try {
      for (let i = 0; i < IDLE; i++) {
        const { sb } = await createAndRun(warm.client, 'microvm');
        idle.push(sb);
        await sb.exec('sleep 100000 > /dev/null 2>&1 &');
      }
      await new Promise((r) => setTimeout(r, 3000));
      const mem = await Promise.all(idle.map(async (sb) => (await sb.refresh()).usage.memoryBytes / 2 ** 20));
      console.log(
        `idle microVM memory (QEMU's proportional set, ${IDLE} clones of one template): mean ${(mem.reduce((a, b) => a + b, 0) / mem.length).toFixed(1)} MiB, each ${mem.map((m) => m.toFixed(1)).join(', ')} MiB`,
      );
      const container = (await createAndRun(warm.client, 'container')).sb;
      await container.exec('sleep 100000 > /dev/null 2>&1 &');
      await new Promise((r) => setTimeout(r, 1000));
      console.log(`idle container memory (its cgroup): ${((await container.refresh()).usage.memoryBytes / 2 ** 20).toFixed(1)} MiB`);
      await container.delete();

      // Pause to disk and resume.
      const pause: number[] = [];
      const saved: number[] = [];
      const resume: number[] = [];
      for (const sb of idle.slice(0, RUNS)) {
        const state = join(warm.dataDir, 'microvm', sb.id, 'state');
        const p0 = performance.now();
        await sb.pause();
        pause.push(performance.now() - p0);
        while (!existsSync(state)) await new Promise((r) => setTimeout(r, 5));
        saved.push(performance.now() - p0);
        const r0 = performance.now();
        await sb.resume();
        await sb.exec('true');
        resume.push(performance.now() - r0);
      }
      console.log('pause and resume:');
      console.log(line('pause (the answer: its CPUs stopped)', pause));
      console.log(line('pause to its state saved on disk', saved));
      console.log(line('resume from disk to first command', resume));
    } finally {
      for (const sb of idle) await sb.delete().catch(() => undefined);
    }
  } finally {
    for (const n of [warm, cold]) {
      await n.warren.close();
      await rm(n.dataDir, { recursive: true, force: true });
    }
  }
}

/** Full VMs of the desktop image: the first create boots it (its template), the rest clone that. */
async function fullVms(): Promise<void> {
  const n = await node(true, true, ['busybox:latest', DESKTOP]);
  try {
    const t0 = performance.now();
    const first = await createAndRun(n.client, 'vm');
    console.log(
      `  full VM (${DESKTOP}, ${VM_MEMORY_MIB} MiB): booted to its desktop, saved as its template, first clone running: ${(performance.now() - t0).toFixed(0)} ms`,
    );
    await first.sb.delete();
    await series(n.client, 'vm', 'full VM, from its template');
  } finally {
    await n.warren.close();
    await rm(n.dataDir, { recursive: true, force: true });
  }
}

await main();
