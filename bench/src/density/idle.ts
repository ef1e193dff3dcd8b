// Density summary, idle sandboxes: a shorter bench:idle (1,000 paused busybox sandboxes by
// default, no warm pool): host memory per paused sandbox, create and resume rates at that count,
// GET /v1/sandboxes over all of them. Runs alone: node bench/dist/density/idle.js [--max N --image I].
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runIdle } from '../idle-run.js';

/** Prints the idle-density section: `--max` sandboxes (1000) of `--image` (busybox:latest). */
export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      max: { type: 'string', default: '1000' },
      image: { type: 'string', default: 'busybox:latest' },
      concurrency: { type: 'string', default: '4' },
    },
    strict: false,
  });
  console.log(`## idle density: ${String(values.max)} paused ${String(values.image)} sandboxes`);
  await runIdle({
    max: Number(values.max),
    image: String(values.image),
    concurrency: Number(values.concurrency),
    zramMiB: 8192,
    minFreeMiB: 2048,
    sample: 50,
    createsAtCount: 50,
    maxFillSeconds: 900,
    every: 250,
    pool: false,
    flags: [],
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await run(process.argv.slice(2));
