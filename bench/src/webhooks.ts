// Warren benchmark: lifecycle events to a webhook. Starts `warren up --webhook URL` (the secret in
// WARREN_WEBHOOK_SECRET) with a receiver on 127.0.0.1, makes and deletes N busybox sandboxes,
// and prints how long each event took from its record to the receiver (the store's clock is this
// machine's), how many POSTs carried them, and how long the receiver waited for the last one;
// then the receiver refuses for a while and the time to catch up after it takes again.
// Prints numbers; asserts nothing.
// Usage: npm run bench:webhooks [-- --count 500 --outage-seconds 5]
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startWebhookReceiver } from '@warren/server';
import { startWarrenUp } from './warren-up.js';

const { values } = parseArgs({ options: { count: { type: 'string', default: '500' }, 'outage-seconds': { type: 'string', default: '5' } } });
const COUNT = Number(values.count);
const OUTAGE_MS = Number(values['outage-seconds']) * 1000;

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))] ?? NaN;

let refuse = false;
const r = await startWebhookReceiver(() => (refuse ? 503 : 200));
const dir = await mkdtemp(join(tmpdir(), 'warren-bench-webhooks-'));
const node = await startWarrenUp(dir, ['--images', 'busybox:latest', '--webhook', r.url], { env: { WARREN_WEBHOOK_SECRET: 'bench-secret-0123456789' } });
try {
  const c = node.client;
  const taken = (): number => r.accepted().length;
  const t0 = Date.now();
  const ids: string[] = [];
  while (ids.length < COUNT) {
    const res = await c.sandboxes.createMany(Math.min(250, COUNT - ids.length), { image: 'busybox:latest', resources: { cpu: 0.01, memoryMiB: 16 } });
    ids.push(...res.sandboxes.map((s) => s.id));
    if (res.errors.length) break;
  }
  await Promise.all(ids.map((id) => c.sandboxes.get(id).then((s) => s.delete())));
  const madeMs = Date.now() - t0;
  const done = Date.now();
  await r.until(() => taken() >= ids.length * 3, 120_000);
  const lag = r.deliveries.flatMap((d) => d.events.map((e) => d.at - Date.parse(e.at)));
  console.log(`${ids.length} sandboxes made and deleted in ${madeMs} ms: ${taken()} events in ${r.deliveries.length} POSTs`);
  console.log(`  record → receiver: p50 ${pct(lag, 50)} ms, p99 ${pct(lag, 99)} ms, max ${Math.max(...lag)} ms`);
  console.log(`  the last event ${Date.now() - done} ms after the last delete answered`);
  // An outage: the receiver refuses while more sandboxes come and go, then takes again.
  refuse = true;
  const before = taken();
  const more = await c.sandboxes.createMany(50, { image: 'busybox:latest', resources: { cpu: 0.01, memoryMiB: 16 } });
  await Promise.all(more.sandboxes.map((s) => s.delete()));
  await new Promise((res) => setTimeout(res, OUTAGE_MS));
  const refused = r.deliveries.filter((d) => d.status === 503).length;
  refuse = false;
  const back = Date.now();
  await r.until(() => taken() >= before + more.sandboxes.length * 3, 120_000);
  console.log(
    `  after a ${OUTAGE_MS} ms outage (${refused} POSTs refused, backoff from 0.5 s): caught up ${Date.now() - back} ms after the receiver took again`,
  );
  const seqs = r.accepted().map((e) => e.seq);
  console.log(`  ${seqs.length} taken, ${new Set(seqs).size} distinct, in order: ${seqs.every((s, i) => i === 0 || s > seqs[i - 1]!)}`);
} finally {
  await node.stop();
  await r.close();
  await rm(dir, { recursive: true, force: true });
}
