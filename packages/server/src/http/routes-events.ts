import { ROUTES } from '@warren/api';
import { eventView } from '../services/events.js';
import { writeLine } from './ndjson.js';
import type { On, RouteDeps } from './route-types.js';

/** Lifecycle events: the caller's tenant's, as server-sent events, read again from any event's id; one sandbox's, as a list. */
export function eventRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.sandboxEvents, async (c) => {
    // Its record decides who may read them (another tenant's sandbox: not_found), after it ended too.
    const rec = await d.sandboxes.record(c.caller, c.params.id);
    c.reply({ events: await d.events.ofSandbox(rec, c.query().since ?? 0) });
  });
  on(ROUTES.events, async (c) => {
    const q = c.query();
    const lastId = c.req.headers['last-event-id'];
    // A reconnecting EventSource sends its first URL again, and the id it got to: that one wins.
    const since = typeof lastId === 'string' && /^\d{1,15}$/.test(lastId) ? Number(lastId) : (q.since ?? null);
    const release = d.events.admit(c.caller.tenant);
    const labels = (q.label ?? []).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)] as const);
    c.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    c.res.write(': lifecycle events\n\n');
    const gone = new AbortController();
    c.res.once('close', () => gone.abort());
    // A comment now and then: proxies keep the stream, and a client sees it is alive.
    const ping = setInterval(() => c.res.write(': keepalive\n\n'), 15_000);
    try {
      for await (const e of d.events.stream(c.caller.tenant, since, gone.signal)) {
        const v = eventView(e);
        if (!labels.every(([k, val]) => v.labels[k] === val)) continue;
        await writeLine(c.res, `id: ${v.seq}\nevent: ${v.type}\ndata: ${JSON.stringify(v)}\n\n`);
        if (c.res.destroyed) break;
      }
    } finally {
      release();
      clearInterval(ping);
      c.res.end();
    }
  });
}
