// Warren benchmark: density, in one run. Runs each section of bench/src/density/ in turn (each
// starts and stops its own Warren, so one section's sandboxes never weigh on the next) and prints
// them under one machine line: CPU classes (a latency sandbox's command beside batch spinners),
// memory requests (how many sandboxes fit, the pressure run), microVM memory (idle, shared
// layers, fork children) and paused containers at scale. Prints numbers; asserts nothing.
// Usage: npm run bench:density [-- --only cpu-classes,memory] [-- section flags, passed on]
import { cpus, totalmem } from 'node:os';

/** The sections, in the order they run (each a module of bench/src/density/ with `run(argv)`). */
const SECTIONS = ['cpu-classes', 'memory', 'microvm-memory', 'idle'] as const;

interface Section {
  run(argv: string[]): Promise<void>;
}

/** `--only a,b` picked out of argv (the rest goes to every section). */
function only(argv: string[]): { names: readonly string[]; rest: string[] } {
  const i = argv.indexOf('--only');
  if (i < 0) return { names: SECTIONS, rest: argv };
  const names = (argv[i + 1] ?? '').split(',').filter(Boolean);
  const unknown = names.filter((n) => !(SECTIONS as readonly string[]).includes(n));
  if (unknown.length) throw new Error(`--only: no section ${unknown.join(', ')} (there are ${SECTIONS.join(', ')})`);
  return { names, rest: [...argv.slice(0, i), ...argv.slice(i + 2)] };
}

async function main(): Promise<void> {
  const { names, rest } = only(process.argv.slice(2));
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const took: string[] = [];
  for (const name of names) {
    console.log(`\n== ${name} ==`);
    const t = performance.now();
    const section = (await import(`./density/${name}.js`)) as Section;
    await section.run(rest);
    took.push(`${name} ${((performance.now() - t) / 1000).toFixed(0)} s`);
  }
  console.log(`\nsections: ${took.join(', ')}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
