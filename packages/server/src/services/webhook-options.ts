import { createHash } from 'node:crypto';
import { WarrenError, type WebhookEvent } from '@warren/api';
import type { EventRecord } from '../store/events.js';
import { eventView } from './events.js';

/** Where lifecycle events are POSTed (`--webhook URL`, repeatable) and the secret that signs them. */
export interface WebhookOptions {
  urls: string[];
  /** The HMAC key (`--webhook-secret-file` or WARREN_WEBHOOK_SECRET): at least 16 characters. */
  secret: string;
}

/** A webhook as the deliverer sends to it. */
export interface Webhook {
  url: string;
  /** Its row in the store (a hash of the URL: a token in it is not written there). */
  key: string;
  /** What /metrics names it by: its origin and path (no credentials, no query). */
  label: string;
}

/** Webhooks one control plane sends to at most. */
export const MAX_WEBHOOKS = 8;
/** A webhook's POST carries at most this many events… */
export const MAX_WEBHOOK_EVENTS = 100;
/** …and at most this many bytes (one event alone may pass it). */
export const MAX_WEBHOOK_BODY_BYTES = 256 * 1024;

/** A webhook's URL, checked: http or https, no credentials in it (throws invalid_argument). */
export function webhookUrl(v: string): string {
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new WarrenError('invalid_argument', `the webhook ${JSON.stringify(v)} is not a URL: http(s)://host/path`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new WarrenError('invalid_argument', `a webhook is http:// or https://, not ${u.protocol}`);
  if (u.username || u.password) throw new WarrenError('invalid_argument', 'a webhook URL may not carry credentials: check the signature instead');
  if (v.length > 2048) throw new WarrenError('invalid_argument', 'a webhook URL is at most 2048 characters');
  return u.toString();
}

/** The webhooks to send to, checked (none: null); throws invalid_argument for a bad URL, too many, or a short or missing secret. */
export function compileWebhooks(o: WebhookOptions | undefined): { hooks: Webhook[]; secret: string } | null {
  if (!o?.urls.length) return null;
  const urls = [...new Set(o.urls.map(webhookUrl))];
  if (urls.length > MAX_WEBHOOKS) throw new WarrenError('invalid_argument', `at most ${MAX_WEBHOOKS} webhooks`);
  if (o.secret.length < 16)
    throw new WarrenError('invalid_argument', 'webhooks need a secret of at least 16 characters (--webhook-secret-file or WARREN_WEBHOOK_SECRET)');
  const hooks = urls.map((url) => {
    const u = new URL(url);
    return { url, key: createHash('sha256').update(url).digest('hex').slice(0, 32), label: u.origin + u.pathname };
  });
  return { hooks, secret: o.secret };
}

/** An event as a webhook delivers it: as `GET /v1/events` shows it, and its tenant. */
export function webhookEvent(e: EventRecord): WebhookEvent {
  return { ...eventView(e), tenant: e.tenant };
}

/**
 * A POST's body from events in seq order (WebhookBody): as many from the first as fit in
 * `maxBytes` (at least one), and their seqs.
 */
export function webhookBatch(rows: EventRecord[], maxBytes = MAX_WEBHOOK_BODY_BYTES): { body: string; seqs: number[] } {
  const parts: string[] = [];
  const seqs: number[] = [];
  let bytes = '{"events":[]}'.length;
  for (const r of rows) {
    const json = JSON.stringify(webhookEvent(r));
    const more = Buffer.byteLength(json) + (parts.length ? 1 : 0);
    if (parts.length && bytes + more > maxBytes) break;
    parts.push(json);
    seqs.push(r.seq);
    bytes += more;
  }
  return { body: `{"events":[${parts.join(',')}]}`, seqs };
}
