// Warren benchmark: idle density and pause/resume (see idle-run.ts). Fills one node with idle
// sandboxes, pausing each, until the target count, admission, the host's memory or the time
// bound stops it; reports host memory per paused sandbox, create and resume rates at that count
// and GET /v1/sandboxes over all of them. Prints numbers; asserts nothing.
// Usage: npm run bench:idle [-- --max 10000 --image busybox:latest --concurrency 4 --zram-mib 16384]
import { parseArgs } from 'node:util';
import { runIdle } from './idle-run.js';

const { values } = parseArgs({
  options: {
    max: { type: 'string', default: '10000' },
    image: { type: 'string', default: 'debian-python:latest' },
    concurrency: { type: 'string', default: '4' },
    'zram-mib': { type: 'string', default: '16384' },
    'min-free-mib': { type: 'string', default: '2048' },
    sample: { type: 'string', default: '100' },
    'creates-at-count': { type: 'string', default: '100' },
    'max-fill-seconds': { type: 'string', default: '3600' },
    every: { type: 'string', default: '500' },
    'no-pool': { type: 'boolean', default: false },
    flag: { type: 'string', multiple: true, default: [] },
    profile: { type: 'string' },
  },
});

await runIdle({
  max: Number(values.max),
  image: values.image,
  concurrency: Number(values.concurrency),
  zramMiB: Number(values['zram-mib']),
  minFreeMiB: Number(values['min-free-mib']),
  sample: Number(values.sample),
  createsAtCount: Number(values['creates-at-count']),
  maxFillSeconds: Number(values['max-fill-seconds']),
  every: Number(values.every),
  pool: !values['no-pool'],
  // `--flag='--max-sandboxes 12000'`: more `warren up` flags.
  flags: values.flag.flatMap((f) => f.split(/\s+/).filter(Boolean)),
  profileDir: values.profile,
});
