import { END_BY, type LifecycleEvent, type LifecycleEventType } from '@warren/api';
import type { EventRecord } from '../store/events.js';
import type { SandboxEndRecord, SandboxRecord, Store } from '../store/store.js';
import type { LeaseRecord } from '../store/leases.js';
import { GroupWrite } from './group-write.js';

/** Events are kept this long (an hour at least is promised). */
const KEEP_MS = 2 * 3600_000;
/** A stream reads the store this often for new events. */
const POLL_MS = 250;
/** A gap in the sequence (an event another replica has not committed yet) is waited for this long, then passed. */
const GAP_MS = 2000;

/** An event as the API shows it. */
export function eventView(e: EventRecord): LifecycleEvent {
  const d = e.data as Omit<LifecycleEvent, 'seq' | 'type' | 'at'>;
  return { seq: e.seq, type: e.type as LifecycleEventType, at: new Date(e.at).toISOString(), ...d };
}

/**
 * Lifecycle events: appended as they happen (in the background, many in one write, so no create
 * waits for one), read back per tenant in order by any replica, kept two hours.
 */
export class EventLog {
  private readonly writes: GroupWrite<Omit<EventRecord, 'seq' | 'at'>, void>;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly store: Store,
    private readonly logger: { warn(msg: string, meta?: unknown): void },
  ) {
    this.writes = new GroupWrite<Omit<EventRecord, 'seq' | 'at'>, void>(async (items) => {
      await store.events.append(items);
      return items.map(() => ({ status: 'fulfilled' as const, value: undefined }));
    });
  }

  start(): void {
    this.timer = setInterval(() => void this.store.events.prune(KEEP_MS).catch(() => undefined), 60_000);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** A sandbox's event. */
  sandbox(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>, type: Exclude<LifecycleEventType, 'lease_lapsed' | 'ended'>): void;
  sandbox(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>, type: 'ended', end: SandboxEndRecord): void;
  sandbox(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>, type: Exclude<LifecycleEventType, 'lease_lapsed'>, end?: SandboxEndRecord): void {
    const data: Record<string, unknown> = { sandbox: rec.id, labels: rec.labels, lease: rec.lease ?? null };
    if (end) data.end = { reason: end.reason, by: END_BY[end.reason], detail: end.detail, at: new Date(end.at).toISOString() };
    this.add({ tenant: rec.tenant, type, data });
  }

  /** A lease lapsed. */
  lapsed(l: LeaseRecord): void {
    this.add({ tenant: l.tenant, type: 'lease_lapsed', data: { sandbox: null, labels: l.labels, lease: l.id, onExpiry: l.onExpiry } });
  }

  private add(e: Omit<EventRecord, 'seq' | 'at'>): void {
    this.writes.add(e).catch((err: unknown) => this.logger.warn('a lifecycle event could not be recorded', { type: e.type, error: String(err) }));
  }

  /**
   * A tenant's events after `since` (none given: from now on), in order, until `signal`. An event
   * another replica numbered earlier but committed later is still delivered: a gap in the
   * sequence is waited for GAP_MS before the stream moves past it.
   */
  async *stream(tenant: string, since: number | null, signal: AbortSignal): AsyncGenerator<EventRecord> {
    let cursor = since ?? (await this.store.events.last());
    const sent = new Set<number>();
    const gapSince = new Map<number, number>();
    while (!signal.aborted) {
      const rows = await this.store.events.after(tenant, cursor, 1000);
      let fresh = 0;
      for (const r of rows) {
        if (sent.has(r.seq)) continue;
        sent.add(r.seq);
        fresh++;
        yield r;
      }
      // The cursor moves over what was sent and over gaps older than GAP_MS (another tenant's events, or never committed).
      const now = Date.now();
      const top = rows.at(-1)?.seq ?? cursor;
      let next = cursor;
      while (next < top) {
        const s = next + 1;
        if (!sent.has(s)) {
          const first = gapSince.get(s) ?? now;
          gapSince.set(s, first);
          if (now - first < GAP_MS) break;
        }
        next = s;
        sent.delete(s);
        gapSince.delete(s);
      }
      cursor = next;
      if (rows.length < 1000 || fresh === 0) await new Promise<void>((r) => setTimeout(r, POLL_MS).unref());
    }
  }
}
