// Warren benchmark section: what idle microVMs hold of the host's memory, on the microVM backend
// itself (debian-python, each a clone of its image's template). Prints, from the host's view
// (/proc/PID/smaps_rollup; swap counted at zram's compressed size): one idle microVM at 0 s and
// after a minute, left alone and paged out by the idle pager; ten microVMs reading the same
// image files (~255 MB), on virtio disks and mapped (DAX), and with KSM (--ksm); a fork child idle;
// and as many idle microVMs at once as fit (toward --many, default 300). Needs root, QEMU and the
// guest kernel (bash scripts/setup.sh). Prints numbers; asserts nothing.
// Usage: node bench/dist/density/microvm-memory.js [--many 300] [--idle-seconds 60] [--skip readers,fork,many] [--ksm] [--disks]
// --ksm: the readers measured again with KSM merging, and the many with it on. The readers are
// measured with the image's layers on virtio disks and again mapped into the guests (a node's
// default; --no-microvm-dax for disks); --disks: the whole section with them on disks.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { IdlePager, enableKsm, hostSwapCost, processCpuSeconds, qemuMemory, type BackendSandbox, type VmMemory } from '@warren/edge';
import { nativeBinary, openBenchMicrovm, partsLine, qemuParts, sh } from '../microvm-bench-backend.js';

const MiB = 2 ** 20;

const mib = (b: number): string => `${(b / MiB).toFixed(1)} MiB`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One QEMU's memory as a line. */
function line(m: VmMemory): string {
  return `held ${mib(m.heldBytes)} = PSS ${mib(m.pssBytes)} (anon ${mib(m.anonBytes)}, file ${mib(m.fileBytes)}) + swap ${mib(m.swapBytes)} costing ${mib(m.swapHeldBytes)} in zram; its own (anon + zram) ${mib(m.anonBytes + m.swapHeldBytes)}`;
}

/** The memory of the QEMUs of `sbs`, each and summed. */
async function memories(sbs: BackendSandbox[]): Promise<{ each: VmMemory[]; sum: VmMemory }> {
  const cost = await hostSwapCost();
  const each = (await Promise.all(sbs.map((s) => qemuMemory(s.initPid!, cost)))).filter((m): m is VmMemory => m !== null);
  const sum: VmMemory = { pssBytes: 0, anonBytes: 0, fileBytes: 0, swapBytes: 0, swapHeldBytes: 0, heldBytes: 0 };
  for (const m of each) for (const k of Object.keys(sum) as Array<keyof VmMemory>) sum[k] += m[k];
  return { each, sum };
}

/**
 * What the host's zram devices hold compressed now (bytes: mm_stat's compr_data_size, summed; its
 * mem_used_total would not grow while zram reuses room that pages swapped in or freed left).
 */
async function zramUsed(): Promise<number> {
  let used = 0;
  for (const m of (await readFile('/proc/swaps', 'utf8')).matchAll(/^\/dev\/(zram\d+)\s/gm))
    used += Number((await readFile(`/sys/block/${m[1]}/mm_stat`, 'utf8').catch(() => '')).trim().split(/\s+/)[1] ?? 0);
  return used;
}

/** What the QEMUs of `sbs` use of the CPU over the next `ms` (cores, all together). */
async function cpuCores(sbs: BackendSandbox[], ms: number): Promise<number> {
  const seconds = async (): Promise<number> => (await Promise.all(sbs.map((sb) => processCpuSeconds(sb.initPid!)))).reduce<number>((a, b) => a + (b ?? 0), 0);
  const [c0, t0] = [await seconds(), performance.now()];
  await sleep(ms);
  return ((await seconds()) - c0) / ((performance.now() - t0) / 1000);
}

/** MemAvailable now (bytes). */
async function memAvailable(): Promise<number> {
  return Number(/^MemAvailable:\s+(\d+) kB/m.exec(await readFile('/proc/meminfo', 'utf8'))?.[1] ?? 0) * 1024;
}

/** KSM's counters (pages). */
async function ksmPages(): Promise<{ shared: number; sharing: number; zero: number }> {
  const r = async (f: string): Promise<number> => Number((await readFile(`/sys/kernel/mm/ksm/${f}`, 'utf8').catch(() => '0')).trim());
  return { shared: await r('pages_shared'), sharing: await r('pages_sharing'), zero: await r('ksm_zero_pages') };
}

/** Has each reader read all of its image's files (at once), prints what one read and how long it took, and answers what they hold. */
async function readAll(readers: BackendSandbox[], how: string): Promise<{ each: VmMemory[]; sum: VmMemory }> {
  const t0 = performance.now();
  const bytes = await Promise.all(
    readers.map((r) => sh(r, 'find /usr /lib /bin /sbin /etc -xdev -type f -print0 2>/dev/null | xargs -0 cat 2>/dev/null | wc -c')),
  );
  console.log(
    `  ten readers, layers ${how}: each read ${mib(Number(bytes[0]!.trim()))} of the image's files (all in ${((performance.now() - t0) / 1000).toFixed(0)} s)`,
  );
  return memories(readers);
}

/** Prints this section. */
export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      many: { type: 'string', default: '300' },
      'idle-seconds': { type: 'string', default: '60' },
      'memory-mib': { type: 'string', default: '256' },
      'max-minutes': { type: 'string', default: '20' },
      skip: { type: 'string', default: '' },
      ksm: { type: 'boolean', default: false },
      disks: { type: 'boolean', default: false },
    },
  });
  const skip = new Set(values.skip.split(',').filter(Boolean));
  const idleMs = Number(values['idle-seconds']) * 1000;
  const memoryMiB = Number(values['memory-mib']);
  const {
    backend,
    digest: DIGEST,
    accel,
    close,
  } = await openBenchMicrovm('debian-python', 'warren-bench-vmmem-', {
    spares: 1,
    // Paged out by this benchmark's own pager, for the sandboxes it names.
    pageoutPath: null,
    ksm: null,
    daxLayers: !values.disks,
  });
  const paged = new Set<string>();
  // zram's memory when the pager first paged out in this section: what it grew since is what the
  // section's page-outs really cost (exact when nothing else swaps meanwhile; the per-QEMU figures
  // charge its swap at the node's average).
  let zramAtFirstPageOut: number | null = null;
  const zramGrowth = async (): Promise<string> => {
    const grew = zramAtFirstPageOut === null ? 0 : (await zramUsed()) - zramAtFirstPageOut;
    zramAtFirstPageOut = null;
    return mib(grew);
  };
  const pager = new IdlePager({
    pageoutPath: nativeBinary('warren-pageout'),
    intervalMs: 2000,
    policy: { idleMs: Math.min(30_000, idleMs / 2), busyCpuFraction: 0.1, regrowBytes: 4 * MiB },
    running: () => live.filter((s) => paged.has(s.id)).map((s) => ({ id: s.id, pid: s.initPid! })),
    // As a node's pager: the guest drops its caches (zeroed) first.
    reclaim: async (id) => {
      zramAtFirstPageOut ??= await zramUsed();
      return backend.dropGuestCaches(id);
    },
  });
  const live: BackendSandbox[] = [];
  let n = 0;
  const create = async (layers: string[] = [DIGEST], mem = memoryMiB): Promise<BackendSandbox> => {
    const sb = await backend.create({ id: `sb_vmmem${n++}`, layers, resources: { cpu: 1, memoryMiB: mem, pids: 1000 } });
    live.push(sb);
    return sb;
  };
  const drop = async (sbs: BackendSandbox[]): Promise<void> => {
    for (const s of sbs) {
      await backend.destroy(s.id).catch(() => undefined);
      live.splice(live.indexOf(s), 1);
      paged.delete(s.id);
    }
  };
  console.log(
    `microVM memory: accelerator ${accel}; debian-python guests of ${memoryMiB} MiB, 1 vCPU, clones of the image's template; layers ${values.disks ? 'on virtio disks' : 'mapped (DAX)'}`,
  );
  const ksmOff = (await readFile('/sys/kernel/mm/ksm/run', 'utf8').catch(() => '0')).trim() === '0';
  if (!ksmOff) console.log('  (KSM was on already on this host: the figures without it are not)');
  pager.start();
  try {
    // 1. One idle microVM: alone, and paged out by the idle pager.
    // The template, then a clone; the first clone is dropped (the template's own pages are warm then).
    await create();
    await drop([live[0]!]);
    if (!skip.has('idle')) {
      const alone = await create();
      const pagedOne = await create();
      paged.add(pagedOne.id);
      await sh(alone, 'python3 -c "print(1)"');
      await sh(pagedOne, 'python3 -c "print(1)"');
      const at0 = await memories([alone, pagedOne]);
      console.log(`  idle microVM at 0 s (after one python3 command): ${line(at0.each[0]!)}`);
      await sleep(idleMs);
      const at60 = await memories([alone, pagedOne]);
      console.log(`  idle microVM after ${idleMs / 1000} s, left alone: ${line(at60.each[0]!)}`);
      console.log(`  idle microVM after ${idleMs / 1000} s, paged out by the idle pager (${pager.pageOuts} page-outs): ${line(at60.each[1]!)}`);
      console.log(`    zram's compressed data grew by ${await zramGrowth()} while it was paged out (its swap's real size on a node where nothing else swaps)`);
      console.log(`  an idle microVM's QEMU uses ${(100 * (await cpuCores([alone], 10_000))).toFixed(1)}% of a CPU (10 s)`);
      await drop([alone, pagedOne]);
    }

    if (!skip.has('readers')) {
      // 2. Ten readers of the same image files.
      const readers = [];
      for (let i = 0; i < 10; i++) readers.push(await create([DIGEST], 512));
      const before = await memAvailable();
      const off = await readAll(readers, values.disks ? 'on virtio disks' : 'mapped (DAX)');
      console.log(
        `    KSM off: the ten hold ${mib(off.sum.heldBytes)} (PSS ${mib(off.sum.pssBytes)}); MemAvailable fell ${mib(before - (await memAvailable()))}`,
      );
      const ksm = values.ksm ? await enableKsm({ pagesToScan: 5000, sleepMs: 20 }) : null;
      if (!ksm) console.log(values.ksm ? '    (no KSM on this host)' : '    (KSM not tried: --ksm)');
      else {
        try {
          const k0 = performance.now();
          // Until a full scan merges less than a MiB more (two scans at least: a page merges on the second that sees it alike).
          let last = -1;
          for (let scans = 0; ; ) {
            await sleep(5000);
            const p = await ksmPages();
            const full = Number((await readFile('/sys/kernel/mm/ksm/full_scans', 'utf8')).trim());
            if (full !== scans) {
              if (scans >= 2 && p.sharing + p.zero - last < 256) break;
              scans = full;
              last = p.sharing + p.zero;
            }
            if (performance.now() - k0 > 300_000) break;
          }
          const on = await memories(readers);
          const p = await ksmPages();
          console.log(
            `    KSM on (merged within ${((performance.now() - k0) / 1000).toFixed(0)} s: ${mib(p.shared * 4096)} kept once for ${mib((p.sharing + p.shared) * 4096)}, ${mib(p.zero * 4096)} zero pages): the ten hold ${mib(on.sum.heldBytes)} (PSS ${mib(on.sum.pssBytes)}); MemAvailable fell ${mib(before - (await memAvailable()))}`,
          );
        } finally {
          await drop(readers);
          await ksm.close();
        }
      }
      if (live.includes(readers[0]!)) await drop(readers);
      // The same ten with the layers the other way (mapped into the guests, a node's default, or on disks), on a backend of their own.
      {
        const other = await openBenchMicrovm('debian-python', 'warren-bench-vmother-', { spares: 1, pageoutPath: null, ksm: null, daxLayers: values.disks });
        try {
          const made: BackendSandbox[] = [];
          for (let i = 0; i < 11; i++)
            made.push(await other.backend.create({ id: `sb_vmother${i}`, layers: [other.digest], resources: { cpu: 1, memoryMiB: 512, pids: 1000 } }));
          // The first clone is dropped, as above (the template's own pages are warm then).
          await other.backend.destroy(made.shift()!.id);
          const before = await memAvailable();
          const on = await readAll(made, values.disks ? 'mapped (DAX)' : 'on virtio disks');
          console.log(`    the ten hold ${mib(on.sum.heldBytes)} (PSS ${mib(on.sum.pssBytes)}); MemAvailable fell ${mib(before - (await memAvailable()))}`);
        } finally {
          await other.close();
        }
      }
    }

    if (!skip.has('fork')) {
      // 3. A fork child, idle: at 0 s, and after the idle minute paged out.
      const source = await create();
      await sh(source, 'python3 -c "print(1)"; sleep 100000 > /dev/null 2>&1 &');
      const base = `fb_${'d'.repeat(24)}`;
      await backend.pause(source.id);
      await backend.freeze(source.id, base);
      await backend.resume(source.id);
      const kids = [await create([DIGEST, `fork:${base}`]), await create([DIGEST, `fork:${base}`])];
      const k0 = await memories(kids);
      const third = await create([DIGEST, `fork:${base}`]);
      await sleep(3000);
      const k1 = await memories([...kids, third]);
      console.log(`  fork child at 0 s: ${line(k0.each[1]!)}; one more child adds ${mib(k1.sum.heldBytes - k0.sum.heldBytes)}`);
      for (const k of [...kids, third]) paged.add(k.id);
      await sleep(idleMs);
      const k2 = await memories([...kids, third]);
      const mean = k2.sum.heldBytes / 3;
      console.log(
        `  fork child after ${idleMs / 1000} s idle, paged out: ${line(k2.each[2]!)}; the 3 children hold ${mib(k2.sum.heldBytes)} (${mib(mean)} each)`,
      );
      console.log(`    its own pages (resident + swapped, uncompressed): ${partsLine(await qemuParts(third.initPid!))}`);
      console.log(
        `    zram's compressed data grew by ${await zramGrowth()} while the 3 were paged out (their swap's real size on a node where nothing else swaps)`,
      );
      await drop([source, ...kids, third]);
      await backend.releaseLayers([`fork:${base}`]);
    }

    if (!skip.has('many')) {
      // 4. As many idle microVMs at once as fit, toward --many, with the idle pager (and KSM with --ksm: a node's is off unless told).
      const many = Number(values.many);
      const until = Date.now() + Number(values['max-minutes']) * 60_000;
      const ksm = values.ksm ? await enableKsm() : null;
      const before = await memAvailable();
      const t0 = performance.now();
      const made: BackendSandbox[] = [];
      let why = `reached ${many}`;
      try {
        while (made.length < many) {
          if (Date.now() > until) {
            why = `stopped at the time limit (${values['max-minutes']} min)`;
            break;
          }
          if ((await memAvailable()) < 2 * 1024 * MiB) {
            why = 'stopped with 2 GiB left available';
            break;
          }
          const sb = await create([DIGEST], 128).catch((e: unknown) => {
            why = `a create failed: ${String(e).slice(0, 200)}`;
            return null;
          });
          if (!sb) break;
          made.push(sb);
          paged.add(sb.id);
          if (made.length % 50 === 0) {
            const m = await memories(made);
            console.log(
              `    ${made.length} idle microVMs after ${((performance.now() - t0) / 1000).toFixed(0)} s: they hold ${mib(m.sum.heldBytes)} (${mib(m.sum.heldBytes / made.length)} each); MemAvailable fell ${mib(before - (await memAvailable()))}`,
            );
          }
        }
        await sleep(idleMs);
        const m = await memories(made);
        const idleCores = await cpuCores(made, 10_000);
        console.log(
          `  ${made.length} idle microVMs of 128 MiB at once (${why}; made in ${((performance.now() - t0) / 1000 - idleMs / 1000).toFixed(0)} s), after ${idleMs / 1000} s idle: they hold ${mib(m.sum.heldBytes)} (${mib(m.sum.heldBytes / Math.max(1, made.length))} each: PSS ${mib(m.sum.pssBytes / Math.max(1, made.length))}, zram ${mib(m.sum.swapHeldBytes / Math.max(1, made.length))}); MemAvailable fell ${mib(before - (await memAvailable()))}; KSM ${ksm ? 'on' : 'off'}; their QEMUs use ${idleCores.toFixed(2)} cores idle`,
        );
      } finally {
        await drop(made);
        await ksm?.close();
      }
    }
  } finally {
    await pager.stop();
    await drop([...live]);
    await close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await run(process.argv.slice(2));
