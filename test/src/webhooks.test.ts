import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { startWebhookReceiver, verifyWebhook, type WebhookReceiver } from '@warren/server';
import type { WebhookEvent } from '@warren/api';
import { forceCleanup, http, startTestWarren, type TestWarren } from './harness.js';

// Signed webhooks from a real node: its lifecycle events POSTed to a receiver on 127.0.0.1 that
// refuses the first two deliveries, then takes them; a restart goes on from the stored cursor.
const SECRET = 'whsec-integration-0123456789';
let r: WebhookReceiver | undefined;
let t: TestWarren | undefined;
after(async () => {
  await t?.close();
  await r?.close();
});

/** A sandbox's event types, in the order the receiver took them. */
const kinds = (evs: WebhookEvent[], sandbox: string): string[] => evs.filter((e) => e.sandbox === sandbox).map((e) => e.type);

test('a sandbox’s life arrives signed and in order after two refused deliveries; events not yet taken when the server stops arrive after its restart', async () => {
  let refuse = false;
  r = await startWebhookReceiver((n) => (n < 2 || refuse ? 500 : 200));
  const receiver = r;
  t = await startTestWarren({ images: ['busybox:latest'], webhooks: { urls: [receiver.url], secret: SECRET } });
  const sb = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'hook' } });
  await sb.pause();
  await sb.resume();
  await sb.delete();
  await receiver.until(() => kinds(receiver.accepted(), sb.id).includes('ended'));
  assert.deepEqual(kinds(receiver.accepted(), sb.id), ['created', 'started', 'paused', 'resumed', 'ended']);
  const seqs = receiver.accepted().map((e) => e.seq);
  assert.deepEqual(
    seqs,
    [...new Set(seqs)].sort((a, b) => a - b),
    'each event accepted once, in seq order',
  );
  // The two refused carried what was then sent again (a duplicate only as a retry).
  assert.deepEqual(
    receiver.deliveries.slice(0, 2).map((d) => d.status),
    [500, 500],
  );
  for (const d of receiver.deliveries.slice(0, 2)) for (const e of d.events) assert.ok(seqs.includes(e.seq));
  const now = Math.floor(Date.now() / 1000);
  for (const d of receiver.deliveries) assert.ok(verifyWebhook(SECRET, String(d.headers['warren-signature']), d.body, now));
  assert.equal(receiver.accepted().find((e) => e.type === 'ended')?.end?.reason, 'deleted');
  const metrics = (await http(t, 'GET', '/metrics')).text;
  assert.match(metrics, /^warren_webhook_failures_total\{hook="[^"]+"\} 2$/m);
  assert.match(metrics, /^warren_webhook_delivered_total\{hook="[^"]+"\} [1-9]/m);
  assert.match(metrics, /^warren_webhook_lag_events\{hook="[^"]+"\} \d+$/m);

  // Refused while the server stops: the cursor stays before them…
  refuse = true;
  const second = await t.client.sandboxes.create({ image: 'busybox:latest' });
  await receiver.until(() => receiver.deliveries.some((d) => d.status === 500 && d.events.some((e) => e.sandbox === second.id)));
  const dataDir = t.dataDir;
  await t.close({ removeData: false });
  // …and they come after the restart, with what happens then.
  refuse = false;
  try {
    t = await startTestWarren({ images: ['busybox:latest'], dataDir, webhooks: { urls: [receiver.url], secret: SECRET } });
  } catch (e) {
    await forceCleanup(dataDir);
    throw e;
  }
  const third = await t.client.sandboxes.create({ image: 'busybox:latest' });
  await third.delete();
  await receiver.until(() => kinds(receiver.accepted(), third.id).includes('ended'));
  assert.deepEqual(kinds(receiver.accepted(), second.id).slice(0, 2), ['created', 'started']);
  const all = receiver.accepted().map((e) => e.seq);
  assert.deepEqual(
    all,
    [...new Set(all)].sort((a, b) => a - b),
  );
  // Nothing the node recorded is missing (what came before the hook's first start aside).
  const stored = t.client.events({ since: seqs[0]! - 1, signal: AbortSignal.timeout(3000) });
  const seen: number[] = [];
  try {
    for await (const e of stored) {
      seen.push(e.seq);
      if (e.sandbox === third.id && e.type === 'ended') break;
    }
  } catch {
    /* the stream's time is up */
  }
  assert.deepEqual(
    all.filter((s) => s <= seen[seen.length - 1]!),
    seen,
  );
});
