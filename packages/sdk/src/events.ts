import { ROUTES, type LifecycleEvent } from '@warren/api';
import type { Transport } from './transport.js';

/** One server-sent event: its id, its name and its data (lines joined). */
export interface SseMessage {
  id: string | null;
  event: string;
  data: string;
}

/** Reads server-sent events from a byte stream (the text/event-stream format: fields per line, a blank line ends an event, `:` lines are comments). */
export async function* serverSentEvents(body: AsyncIterable<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  let buf = '';
  let msg: { id: string | null; event: string; data: string[] } = { id: null, event: 'message', data: [] };
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line === '') {
        if (msg.data.length) yield { id: msg.id, event: msg.event, data: msg.data.join('\n') };
        msg = { id: null, event: 'message', data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'data') msg.data.push(value);
      else if (field === 'id') msg.id = value;
      else if (field === 'event') msg.event = value;
    }
  }
}

export interface EventsOptions {
  /** Events after this seq (a stream read again from the last one seen); none: from now on. */
  since?: number;
  /** Only events of sandboxes (or leases) with all these labels. */
  labels?: Record<string, string>;
  signal?: AbortSignal;
}

/**
 * The tenant's lifecycle events as they happen (created, started, paused, resumed, ended with
 * why, lease_lapsed), until `signal` aborts or the server ends the stream: read again with
 * `since` the last `seq` seen, it misses nothing kept (an hour at least).
 * @example
 * for await (const ev of warren.events({ labels: { job: 'rl-123' } })) if (ev.type === 'ended') console.log(ev.sandbox, ev.end?.reason);
 */
export async function* lifecycleEvents(t: Transport, o: EventsOptions = {}): AsyncGenerator<LifecycleEvent> {
  const label = Object.entries(o.labels ?? {}).map(([k, v]) => `${k}=${v}`);
  const res = await t.request(
    ROUTES.events,
    {},
    { query: { since: o.since, label: label.length ? label : undefined }, accept: 'text/event-stream', signal: o.signal },
  );
  if (!res.body) return;
  for await (const m of serverSentEvents(res.body)) yield JSON.parse(m.data) as LifecycleEvent;
}
