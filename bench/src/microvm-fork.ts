// Warren benchmark: forking a running microVM N ways, on the microVM backend itself (the API's
// fork is not here yet). An idle busybox microVM is frozen as a fork base (its memory as a file,
// its devices, its disk) and children start from it, each with its memory the base's file mapped
// copy-on-write. Prints, for forks ×1 and ×N: the freeze (the source's CPUs stopped meanwhile),
// the first child ready (its init answers) and all ready, after the freeze and in all; then the
// host memory each idle child's QEMU holds (its proportional set from /proc/PID/smaps_rollup: its
// own pages, and its share of the base's pages that all children map) beside a fresh create's (a
// clone of its image's template, as a node makes one). Needs root (the children's taps), QEMU and
// the guest kernel (bash scripts/setup.sh). Prints numbers; asserts nothing.
// Usage: npm run bench:microvm-fork [-- --forks 8 --runs 3 --memory-mib 256]
import { readFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import type { BackendCreateSpec, BackendSandbox } from '@warren/edge';
import { openBenchMicrovm, sh } from './microvm-bench-backend.js';
import { machineLine } from './side-by-side.js';
import { pct } from './stats.js';

const { values } = parseArgs({
  options: {
    forks: { type: 'string', default: '8' },
    runs: { type: 'string', default: '3' },
    'memory-mib': { type: 'string', default: '256' },
  },
});
const FORKS = Number(values.forks);
const RUNS = Number(values.runs);
const MEMORY_MIB = Number(values['memory-mib']);
interface Memory {
  /** Its proportional set (MiB), and of it its anonymous pages and its share of file pages. */
  pss: number;
  anon: number;
  file: number;
  /** Of its anonymous pages: the guest's own (its RAM's pages written since it was cloned), TCG's translated code. */
  guest: number;
  tcg: number;
}

/** A QEMU's memory, from /proc/PID/smaps_rollup and (for what its anonymous pages are) /proc/PID/smaps. */
async function memory(pid: number): Promise<Memory> {
  const t = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (k: string, text = t): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) / 1024;
  let guest = 0;
  let tcg = 0;
  // One mapping: its header line, then its fields.
  for (const m of (await readFile(`/proc/${pid}/smaps`, 'utf8')).split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const head = m.slice(0, m.indexOf('\n'));
    if (head.endsWith('/ram')) guest += kb('Anonymous', m);
    else if (/ rwxp 00000000 00:00 0\s*$/.test(head)) tcg += kb('Rss', m);
  }
  return { pss: kb('Pss'), anon: kb('Pss_Anon'), file: kb('Pss_File'), guest, tcg };
}

/** A line of memory figures (MiB): one QEMU's, or the mean of several. */
function memoryLine(ms: Memory[]): string {
  const m = (k: keyof Memory): string => mib(mean(ms.map((x) => x[k])));
  return `${m('pss')}: anonymous ${m('anon')} (the guest's own pages ${m('guest')}, TCG's code ${m('tcg')}, the rest QEMU's own), file ${m('file')}`;
}

const ms = (x: number): string => `${x.toFixed(0).padStart(5)} ms`;
const mib = (x: number): string => `${x.toFixed(1)} MiB`;
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

async function main(): Promise<void> {
  console.log(machineLine());
  const {
    backend,
    digest: DIGEST,
    accel,
    close,
  } = await openBenchMicrovm('busybox', 'warren-bench-fork-', {
    // No spare QEMUs in the background: what is measured is the forks alone.
    spares: 0,
    // Taps QEMU opens, left unaddressed on the host: each guest takes its own address all the same.
    bindTap: async () => undefined,
  });
  const slot = randomBytes(2).toString('hex');
  let n = 0;
  const live: string[] = [];
  const create = async (layers: string[]): Promise<{ sb: BackendSandbox; readyMs: number }> => {
    const i = n++;
    const id = `sb_bench${i}`;
    const tap: BackendCreateSpec['tap'] = {
      ifname: `wb${slot}${i}`,
      address: `10.253.${i >> 7}.${(2 * i + 1) & 255}`,
      prefix: 31,
      gateway: `10.253.${i >> 7}.${(2 * i) & 255}`,
    };
    live.push(id);
    const t0 = performance.now();
    const sb = await backend.create({ id, layers, resources: { cpu: 1, memoryMiB: MEMORY_MIB, pids: 1000 }, tap });
    return { sb, readyMs: performance.now() - t0 };
  };
  try {
    console.log(`microVM fork: accelerator ${accel}; guests of ${MEMORY_MIB} MiB, 1 vCPU, busybox, an idle shell (sleep) running`);
    // The image's template made first (one boot and save), then a fresh create from it, as a node makes them.
    await create([DIGEST]);
    const fresh = await create([DIGEST]);
    console.log(`  fresh create (a clone of its image's template, no spare ready): ${ms(fresh.readyMs)}`);
    const source = (await create([DIGEST])).sb;
    await sh(source, 'sleep 100000 > /dev/null 2>&1 &');
    await sh(fresh.sb, 'sleep 100000 > /dev/null 2>&1 &');

    const fork = async (count: number): Promise<{ freeze: number; first: number; all: number; kids: BackendSandbox[] }> => {
      const base = 'fb_' + randomBytes(12).toString('hex');
      const t0 = performance.now();
      await backend.pause(source.id);
      await backend.freeze(source.id, base);
      await backend.resume(source.id);
      const freeze = performance.now() - t0;
      const kids = await Promise.all(Array.from({ length: count }, () => create([DIGEST, `fork:${base}`])));
      return { freeze, first: Math.min(...kids.map((k) => k.readyMs)), all: performance.now() - t0 - freeze, kids: kids.map((k) => k.sb) };
    };
    const drop = async (kids: BackendSandbox[]): Promise<void> => {
      for (const k of kids) {
        await backend.destroy(k.id);
        live.splice(live.indexOf(k.id), 1);
      }
      await backend.releaseLayers((await backend.bases()).map((b) => `fork:${b}`));
    };
    let last: BackendSandbox[] = [];
    for (const count of [1, FORKS]) {
      const s: { freeze: number[]; first: number[]; all: number[] } = { freeze: [], first: [], all: [] };
      for (let r = 0; r < RUNS; r++) {
        await drop(last);
        const f = await fork(count);
        s.freeze.push(f.freeze);
        s.first.push(f.first);
        s.all.push(f.all);
        last = f.kids;
      }
      const row = (label: string, xs: number[]): string => `${label} p50 ${ms(pct(xs, 50))} max ${ms(Math.max(...xs))}`;
      console.log(`  fork ×${count} (${RUNS} runs): ${row('freeze', s.freeze)};  ${row('first child ready', s.first)}`);
      console.log(
        `  fork ×${count}: ${row('all ready after the freeze', s.all)};  ${row(
          'in all',
          s.all.map((x, i) => x + s.freeze[i]!),
        )}`,
      );
    }
    // The last ×N children, idle a few seconds (their shell's sleep runs on), beside the fresh create.
    await new Promise((r) => setTimeout(r, 3000));
    const kids = await Promise.all(last.map((k) => memory(k.initPid!)));
    const one = await memory(fresh.sb.initPid!);
    console.log(`idle memory (QEMU's proportional set: its anonymous pages, and its share of file pages: the base's or template's RAM, QEMU's libraries):`);
    console.log(`  fresh create: ${memoryLine([one])}`);
    console.log(`  fork child, mean of ${kids.length}: ${memoryLine(kids)}; the ${kids.length} together ${mib(kids.reduce((a, k) => a + k.pss, 0))}`);
    const nine = await create([DIGEST, `fork:${(await backend.bases())[0]!}`]);
    await new Promise((r) => setTimeout(r, 3000));
    const after = await Promise.all([...last, nine.sb].map((k) => memory(k.initPid!)));
    console.log(
      `  one more child, idle 3 s: the children together grow by ${mib(after.reduce((a, k) => a + k.pss, 0) - kids.reduce((a, k) => a + k.pss, 0))} (its marginal memory)`,
    );
  } finally {
    for (const id of live) await backend.destroy(id).catch(() => undefined);
    await close();
  }
}

await main();
