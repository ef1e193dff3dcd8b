import { after, afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Store } from '../store/store.js';
import { startTestPostgres, type TestPostgres } from '../testing/postgres.js';
import { postgresStores, sqliteStores, type StoreKind } from '../testing/store-places.js';
import { startWebhookReceiver, type WebhookReceiver } from '../testing/webhook-receiver.js';
import { compileWebhooks } from './webhook-options.js';
import { verifyWebhook } from './webhook-signature.js';
import { WebhookDeliverer, Webhooks, type WebhookTiming } from './webhooks.js';

// The deliverer over each kind of store (replicas and restarts are stores opened on one place),
// sending to a real HTTP server on 127.0.0.1; its pace shortened.
let server: Promise<TestPostgres> | undefined;
after(async () => {
  await (await server?.catch(() => undefined))?.stop();
});
const KINDS: StoreKind[] = [sqliteStores, postgresStores(() => (server ??= startTestPostgres()))];

const SECRET = 'whsec-test-0123456789';
const FAST: Partial<WebhookTiming> = { settleMs: 0, pollMs: 5, timeoutMs: 300, claimTtlMs: 3000, backoff: { firstMs: 10, maxMs: 40 } };
const logs: string[] = [];
const logger = { info: () => undefined, warn: (m: string) => void logs.push(m) };

/** Appends `n` events, of two tenants. */
async function append(s: Store, n: number): Promise<void> {
  await s.events.append(Array.from({ length: n }, (_, i) => ({ tenant: `t${i % 2}`, type: 'created', data: { sandbox: `sb_${i}`, labels: {}, lease: null } })));
}

/** The seqs of the events stored, all of them, in order. */
const allSeqs = async (s: Store): Promise<number[]> => (await s.events.after(null, 0, 10_000)).map((e) => e.seq);

/** Deliverers still running when a test ends (it failed) are closed. */
const running = new Set<{ close(): Promise<void> }>();
afterEach(async () => {
  for (const d of running) await d.close();
  running.clear();
});
const stopping = <T extends { close(): Promise<void> }>(d: T): T => {
  running.add(d);
  return d;
};

/** Waits until a replica holds the claim on the receiver's hook. */
const claimed = (s: Store, r: WebhookReceiver): Promise<void> =>
  until(async () => (await s.webhooks.cursor(compileWebhooks({ urls: [r.url], secret: SECRET })!.hooks[0]!.key)) !== null);

const deliverer = (s: Store, r: WebhookReceiver, timing = FAST): WebhookDeliverer => {
  const c = compileWebhooks({ urls: [r.url], secret: SECRET })!;
  return new WebhookDeliverer(s, c.hooks[0]!, { secret: SECRET, logger, timing });
};

for (const kind of KINDS) {
  test(`${kind.name}: failed POSTs (a timeout, a 500) are retried until a 2xx; every event arrives once accepted, in order, signed; a restart goes on from the cursor`, async () => {
    const place = await kind.place();
    const r = await startWebhookReceiver((n) => (n === 0 ? 'hang' : n === 1 ? 500 : 200));
    try {
      const s = await place.open();
      // A hook begins at the newest event: these are before it.
      await append(s, 3);
      const d = stopping(deliverer(s, r));
      d.start();
      await claimed(s, r);
      await append(s, 250);
      const want = (await allSeqs(s)).slice(3);
      await r.until(() => r.accepted().length >= want.length);
      assert.deepEqual(
        r.accepted().map((e) => e.seq),
        want,
      );
      // The first batch three times (1: no answer, 2: 500, 3: accepted), each signed when sent; the ids in a header too.
      const first = r.deliveries.slice(0, 3);
      assert.deepEqual(
        first.map((x) => [x.status, x.headers['warren-delivery-attempt']]),
        [
          [0, '1'],
          [500, '2'],
          [200, '3'],
        ],
      );
      const now = Math.floor(Date.now() / 1000);
      for (const x of r.deliveries) {
        assert.ok(verifyWebhook(SECRET, String(x.headers['warren-signature']), x.body, now), 'signed');
        assert.equal(x.headers['warren-event-ids'], x.events.map((e) => e.seq).join(','));
        assert.ok(x.events.length <= 100);
      }
      assert.deepEqual([...new Set(r.accepted().map((e) => e.tenant))].sort(), ['t0', 't1']);
      // The receiver saw the last POST before its sender saw the answer.
      await until(async () => d.delivered === want.length);
      assert.equal(d.failures, 2);
      await d.close();
      // Restarted (another store on the same place): only what came since.
      const again = await place.open();
      await append(again, 5);
      const d2 = stopping(deliverer(again, r));
      d2.start();
      const all = (await allSeqs(again)).slice(3);
      await r.until(() => r.accepted().length >= all.length);
      assert.deepEqual(
        r.accepted().map((e) => e.seq),
        all,
      );
      await d2.close();
    } finally {
      await r.close();
      await place.remove();
    }
  });

  test(`${kind.name}: of two replicas one sends; when it stops the other goes on from its cursor; /metrics shows what was delivered and the lag`, async () => {
    const place = await kind.place();
    const r = await startWebhookReceiver();
    try {
      const [a, b] = [await place.open(), await place.open()];
      const hooks = compileWebhooks({ urls: [r.url], secret: SECRET })!.hooks;
      const wa = stopping(new Webhooks(a, hooks, { secret: SECRET, logger, timing: FAST }));
      const wb = stopping(new Webhooks(b, hooks, { secret: SECRET, logger, timing: FAST }));
      wa.start();
      // b starts once a holds the claim.
      await claimed(a, r);
      wb.start();
      await append(a, 40);
      await append(b, 40);
      const want = await allSeqs(a);
      await r.until(() => r.accepted().length >= 80);
      const metric = async (w: Webhooks, name: string): Promise<number> => Number(new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, 'm').exec(await w.metrics())?.[1]);
      await until(async () => (await metric(wa, 'warren_webhook_delivered_total')) === 80);
      assert.equal(await metric(wb, 'warren_webhook_delivered_total'), 0);
      // The lag is the store's cursor's: a counts a batch delivered a moment before it moves the cursor past it.
      await until(async () => (await metric(wb, 'warren_webhook_lag_events')) === 0);
      await wa.close();
      await append(b, 20);
      want.push(...(await allSeqs(b)).slice(80));
      await r.until(() => r.accepted().length >= 100);
      assert.deepEqual(
        r.accepted().map((e) => e.seq),
        want,
      );
      await until(async () => (await metric(wb, 'warren_webhook_delivered_total')) === 20);
      await wb.close();
      await append(a, 7);
      assert.equal(await metric(wa, 'warren_webhook_lag_events'), 7);
    } finally {
      await r.close();
      await place.remove();
    }
  });
}

test('a webhook behind the oldest event kept skips to it, and says so', async () => {
  const place = await sqliteStores.place();
  const r = await startWebhookReceiver((n) => (n === 0 ? 500 : 200));
  try {
    const s = await place.open();
    const d = stopping(deliverer(s, r, { ...FAST, backoff: { firstMs: 200, maxMs: 200 } }));
    d.start();
    await claimed(s, r);
    await append(s, 3);
    await r.until(() => r.deliveries.length === 1);
    // Pruned while the first batch waits for its retry.
    await s.events.prune(-60_000);
    await append(s, 2);
    const kept = await allSeqs(s);
    await r.until(() => r.accepted().length >= 2);
    assert.deepEqual(
      r.accepted().map((e) => e.seq),
      kept,
    );
    assert.ok(logs.some((m) => m.includes('fell behind the events kept')));
    await d.close();
  } finally {
    await r.close();
    await place.remove();
  }
});

/** Waits for `pred` (polling every 5 ms), failing after 5 s. */
async function until(pred: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error('not so after 5 s');
    await new Promise((res) => setTimeout(res, 5));
  }
}
