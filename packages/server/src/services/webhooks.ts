import { randomBytes } from 'node:crypto';
import type { Logger } from '@warren/edge';
import type { Store } from '../store/store.js';
import { SETTLE_MS } from './events.js';
import { WEBHOOK_BACKOFF, webhookBackoffMs, type WebhookBackoff } from './webhook-backoff.js';
import { MAX_WEBHOOK_EVENTS, webhookBatch, type Webhook } from './webhook-options.js';
import { signWebhook } from './webhook-signature.js';

/** How a deliverer paces itself (ms; tests make them short). */
export interface WebhookTiming {
  /** An event is sent once it is this old (see EventLog: none numbered before it can still come). */
  settleMs: number;
  /** How often the log is read while there is nothing to send. */
  pollMs: number;
  /** A POST not answered in this long failed. */
  timeoutMs: number;
  /** A replica's claim on a hook lasts this long unless renewed (a third of it, at most, between renewals). */
  claimTtlMs: number;
  backoff: WebhookBackoff;
}

const TIMING: WebhookTiming = { settleMs: SETTLE_MS, pollMs: 500, timeoutMs: 10_000, claimTtlMs: 30_000, backoff: WEBHOOK_BACKOFF };

/** What a deliverer is built with besides its store and hook. */
export interface WebhookDelivererOptions {
  secret: string;
  logger: Logger;
  timing?: Partial<WebhookTiming>;
  /** The signatures' clock (ms; default Date.now). */
  now?: () => number;
  /** The backoff's jitter (default Math.random). */
  random?: () => number;
}

/**
 * Sends every tenant's lifecycle events to one webhook, in seq order, a batch at a time, each
 * batch until it is answered 2xx (retried after a growing wait, never dropped): at least once.
 * The cursor is in the store and moves only after a 2xx, so a restart goes on where it was; of
 * replicas sharing the store, the one holding the hook's claim sends, the others wait to take it.
 */
export class WebhookDeliverer {
  /** Events this replica delivered (answered 2xx; a retried batch counts again). */
  delivered = 0;
  /** POSTs that failed: an answer not 2xx, a timeout, no connection. */
  failures = 0;
  private readonly holder = randomBytes(8).toString('hex');
  private readonly stop = new AbortController();
  private readonly t: WebhookTiming;
  private running: Promise<void> | null = null;
  private holding = false;

  constructor(
    private readonly store: Store,
    readonly hook: Webhook,
    private readonly o: WebhookDelivererOptions,
  ) {
    this.t = { ...TIMING, ...o.timing };
  }

  /** Starts sending (once). */
  start(): void {
    this.running ??= this.run();
  }

  /** Stops, a POST in flight cut off (its batch is sent again by whoever goes on), and gives the claim up. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.running;
    if (this.holding) await this.store.webhooks.release(this.hook.key, this.holder).catch(() => undefined);
  }

  private async run(): Promise<void> {
    const { store, hook, t } = this;
    const now = this.o.now ?? Date.now;
    const random = this.o.random ?? Math.random;
    let cursor = 0;
    let known = false;
    let renewedAt = 0;
    let attempt = 0;
    let retryAt = 0;
    let skipNoted = -1;
    while (!this.stop.signal.aborted) {
      try {
        if (!this.holding || Date.now() - renewedAt > t.claimTtlMs / 3) {
          // A hook new to the store begins at the newest event: what came before it was not promised.
          const start = known ? 0 : await store.events.last();
          const claimed = await store.webhooks.claim(hook.key, this.holder, t.claimTtlMs, start);
          known = true;
          if (claimed === null) {
            if (this.holding) this.o.logger.warn('another replica sends to the webhook now', { webhook: hook.label });
            this.holding = false;
            await this.sleep(t.claimTtlMs / 3);
            continue;
          }
          if (!this.holding) this.o.logger.info('sending lifecycle events to the webhook', { webhook: hook.label, after: claimed });
          this.holding = true;
          renewedAt = Date.now();
          cursor = claimed;
        }
        const wait = retryAt - Date.now();
        if (wait > 0) {
          await this.sleep(Math.min(wait, t.claimTtlMs / 3));
          continue;
        }
        const rows = await store.events.after(null, cursor, MAX_WEBHOOK_EVENTS, t.settleMs);
        if (!rows.length) {
          await this.sleep(t.pollMs);
          continue;
        }
        const first = rows[0]!.seq;
        if (first > cursor + 1 && skipNoted !== cursor && (await store.events.first()) >= first) {
          skipNoted = cursor;
          this.o.logger.warn('the webhook fell behind the events kept: those pruned were never sent', { webhook: hook.label, from: cursor + 1, to: first - 1 });
        }
        const { body, seqs } = webhookBatch(rows);
        if (!(await this.post(body, seqs, attempt + 1, now))) {
          if (this.stop.signal.aborted) break;
          this.failures++;
          attempt++;
          retryAt = Date.now() + webhookBackoffMs(attempt, random, t.backoff);
          continue;
        }
        this.delivered += seqs.length;
        attempt = 0;
        cursor = seqs[seqs.length - 1]!;
        renewedAt = Date.now();
        if (!(await store.webhooks.advance(hook.key, this.holder, cursor, t.claimTtlMs))) {
          this.o.logger.warn('another replica took the webhook over (this one stalled past its claim)', { webhook: hook.label });
          this.holding = false;
        }
      } catch (e) {
        // The store is away: try again in a while, from the cursor the store holds.
        this.o.logger.warn('the webhook deliverer could not read its store', { webhook: hook.label, error: String(e) });
        this.holding = false;
        await this.sleep(Math.max(t.pollMs, 1000));
      }
    }
  }

  /** One POST of a batch; whether it was answered 2xx. */
  private async post(body: string, seqs: number[], attempt: number, now: () => number): Promise<boolean> {
    try {
      const res = await fetch(this.hook.url, {
        method: 'POST',
        body,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'warren-webhooks',
          'warren-event-ids': seqs.join(','),
          'warren-signature': signWebhook(this.o.secret, body, Math.floor(now() / 1000)),
          'warren-delivery-attempt': String(attempt),
        },
        // A redirect is not a delivery: it is retried, never followed somewhere the operator did not name.
        redirect: 'manual',
        signal: AbortSignal.any([this.stop.signal, AbortSignal.timeout(this.t.timeoutMs)]),
      });
      await res.body?.cancel().catch(() => undefined);
      if (res.status >= 200 && res.status < 300) return true;
      this.o.logger.warn('the webhook refused a delivery; it will be retried', { webhook: this.hook.label, status: res.status, attempt, events: seqs.length });
    } catch (e) {
      if (!this.stop.signal.aborted)
        this.o.logger.warn('a webhook delivery failed; it will be retried', { webhook: this.hook.label, error: String(e), attempt, events: seqs.length });
    }
    return false;
  }

  /** Waits `ms`, or less if the deliverer is closed. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.stop.signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.stop.signal.addEventListener('abort', done, { once: true });
    });
  }
}

/** A control plane's webhooks: a deliverer each, and their /metrics. */
export class Webhooks {
  private readonly deliverers: WebhookDeliverer[];

  constructor(
    private readonly store: Store,
    hooks: Webhook[],
    o: WebhookDelivererOptions,
  ) {
    this.deliverers = hooks.map((h) => new WebhookDeliverer(store, h, o));
  }

  start(): void {
    for (const d of this.deliverers) d.start();
  }

  async close(): Promise<void> {
    await Promise.all(this.deliverers.map((d) => d.close()));
  }

  /**
   * Prometheus text: events delivered and POSTs failed by this replica, and how far each hook is
   * behind the newest event (seqs; from the store, so any replica answers the same).
   */
  async metrics(): Promise<string> {
    if (!this.deliverers.length) return '';
    const last = await this.store.events.last();
    const lines = ['# TYPE warren_webhook_delivered_total counter', '# TYPE warren_webhook_failures_total counter', '# TYPE warren_webhook_lag_events gauge'];
    for (const d of this.deliverers) {
      const hook = `{hook="${d.hook.label.replace(/["\\\n]/g, '_')}"}`;
      const cursor = await this.store.webhooks.cursor(d.hook.key);
      lines.push(`warren_webhook_delivered_total${hook} ${d.delivered}`, `warren_webhook_failures_total${hook} ${d.failures}`);
      lines.push(`warren_webhook_lag_events${hook} ${cursor === null ? 0 : Math.max(0, last - cursor)}`);
    }
    return lines.join('\n') + '\n';
  }
}
