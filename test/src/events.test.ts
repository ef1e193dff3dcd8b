import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Warren, type EventsOptions } from '@warren/sdk';
import type { LifecycleEvent } from '@warren/api';
import { startTestWarren, type TestWarren } from './harness.js';

// Lifecycle events on one real node: a sandbox's life and a lease's lapse as they happen, read
// again from any event's id, for the caller's tenant only.
let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
});
after(async () => {
  await t?.close();
});

/** Reads a stream until `enough` holds of what came; then stops it. */
async function collect(c: Warren, o: EventsOptions, enough: (evs: LifecycleEvent[]) => boolean): Promise<LifecycleEvent[]> {
  const stop = new AbortController();
  const evs: LifecycleEvent[] = [];
  const timer = setTimeout(() => stop.abort(), 15_000);
  try {
    for await (const ev of c.events({ ...o, signal: stop.signal })) {
      evs.push(ev);
      if (enough(evs)) break;
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
    stop.abort();
  }
  return evs;
}

test('a sandbox’s life as events, in order, read again from any id; a lease’s lapse; another tenant sees none of it', async () => {
  const sb = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'ev' } });
  await sb.pause();
  await sb.resume();
  await sb.delete();
  const kinds = (evs: LifecycleEvent[]): string[] => evs.filter((e) => e.sandbox === sb.id).map((e) => e.type);
  const evs = await collect(t.client, { since: 0, labels: { job: 'ev' } }, (x) => kinds(x).includes('ended'));
  assert.deepEqual(kinds(evs), ['created', 'started', 'paused', 'resumed', 'ended']);
  const ended = evs.find((e) => e.type === 'ended')!;
  assert.deepEqual([ended.end?.reason, ended.end?.by, ended.labels.job], ['deleted', 'operator', 'ev']);
  // Read again from the id of `started`: what came after it, the same.
  const started = evs.find((e) => e.type === 'started')!;
  const again = await collect(t.client, { since: started.seq, labels: { job: 'ev' } }, (x) => kinds(x).includes('ended'));
  assert.deepEqual(kinds(again), ['paused', 'resumed', 'ended']);
  // A lease's lapse, with its sandbox's end.
  const lease = await t.client.leases.create({ ttlSeconds: 60, labels: { job: 'ev' } }, { keepAlive: false });
  const leased = await t.client.sandboxes.create({ image: 'busybox:latest', lease: lease.id, labels: { job: 'ev' } });
  await lease.renew(1);
  const lapse = await collect(t.client, { since: ended.seq, labels: { job: 'ev' } }, (x) => x.some((e) => e.sandbox === leased.id && e.type === 'ended'));
  assert.ok(lapse.some((e) => e.type === 'lease_lapsed' && e.lease === lease.id && e.onExpiry === 'delete'));
  assert.equal(lapse.find((e) => e.sandbox === leased.id && e.type === 'ended')?.end?.reason, 'lease');
  // Another tenant: its own sandbox's events, none of these.
  const key = await t.client.createKey({ tenant: 'elsewhere', role: 'runner' });
  const other = new Warren({ url: t.url, apiKey: key });
  const mine = await other.sandboxes.create({ image: 'busybox:latest' });
  const seen = await collect(other, { since: 0 }, (x) => x.some((e) => e.sandbox === mine.id && e.type === 'started'));
  assert.deepEqual([...new Set(seen.map((e) => e.sandbox))], [mine.id]);
  await mine.delete();
});
