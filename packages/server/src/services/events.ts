import { END_BY, MAX_SANDBOX_EVENTS, WarrenError, type LifecycleEvent, type LifecycleEventType } from '@warren/api';
import type { EventRecord } from '../store/events.js';
import type { SandboxEndRecord, SandboxRecord, Store } from '../store/store.js';
import type { LeaseRecord } from '../store/leases.js';
import { GroupWrite } from './group-write.js';

/** Events are kept this long (an hour at least is promised). */
const KEEP_MS = 2 * 3600_000;
/** A stream reads the store this often for new events. */
const POLL_MS = 250;
/** The streams one tenant may have open on a replica at once (each reads the store a few times a second). */
export const MAX_STREAMS_PER_TENANT = 16;
/** How long an event waits for others to be written with it (ms). */
const LINGER_MS = 50;
/** An event is streamed once it is this old: what another replica numbered before it has committed by then. */
export const SETTLE_MS = 500;

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
  /** Streams open per tenant. */
  private readonly open = new Map<string, number>();
  /** Ends recorded by this replica since it started, by reason (for /metrics). */
  readonly ends = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly logger: { warn(msg: string, meta?: unknown): void },
    /** How old an event must be to be streamed, and how often a stream reads (ms; tests make them short). */
    private readonly timing: { settleMs: number; pollMs: number } = { settleMs: SETTLE_MS, pollMs: POLL_MS },
  ) {
    // Events wait a little for others to go in the same write: a create's two, and its neighbours'.
    this.writes = new GroupWrite<Omit<EventRecord, 'seq' | 'at'>, void>(
      async (items) => {
        await store.events.append(items);
        return items.map(() => ({ status: 'fulfilled' as const, value: undefined }));
      },
      { linger: () => new Promise((r) => setTimeout(r, LINGER_MS)) },
    );
  }

  start(): void {
    // A few thousand at a time, again while there were that many.
    const prune = async (): Promise<void> => {
      while ((await this.store.events.prune(KEEP_MS)) >= 5000);
    };
    this.timer = setInterval(() => void prune().catch(() => undefined), 60_000);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** A sandbox's event. */
  sandbox(
    rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>,
    type: Exclude<LifecycleEventType, 'lease_lapsed' | 'ended' | 'forked' | 'snapshotted'>,
    end?: undefined,
    reason?: 'memory',
  ): void;
  sandbox(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>, type: 'ended', end: SandboxEndRecord): void;
  sandbox(
    rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>,
    type: Exclude<LifecycleEventType, 'lease_lapsed' | 'forked' | 'snapshotted'>,
    end?: SandboxEndRecord,
    reason?: 'memory',
  ): void {
    const data: Record<string, unknown> = { sandbox: rec.id, labels: rec.labels, lease: rec.lease ?? null };
    if (reason) data.reason = reason;
    if (end) {
      data.end = { reason: end.reason, by: END_BY[end.reason], detail: end.detail, at: new Date(end.at).toISOString() };
      this.ends.set(end.reason, (this.ends.get(end.reason) ?? 0) + 1);
    }
    this.add({ tenant: rec.tenant, type, data });
  }

  /** Takes a stream's place for a tenant (resource_exhausted past MAX_STREAMS_PER_TENANT); answers what gives it back. */
  admit(tenant: string): () => void {
    const n = this.open.get(tenant) ?? 0;
    if (n >= MAX_STREAMS_PER_TENANT)
      throw new WarrenError('resource_exhausted', `a tenant may have ${MAX_STREAMS_PER_TENANT} event streams open at once`, {
        maxStreams: MAX_STREAMS_PER_TENANT,
      });
    this.open.set(tenant, n + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.open.get(tenant) ?? 1) - 1;
      if (left > 0) this.open.set(tenant, left);
      else this.open.delete(tenant);
    };
  }

  /** A sandbox was forked: its children (each has its own `created` and `started` too). */
  forked(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>, children: string[]): void {
    this.add({ tenant: rec.tenant, type: 'forked', data: { sandbox: rec.id, labels: rec.labels, lease: rec.lease ?? null, children } });
  }

  /** A snapshot of a sandbox was kept. */
  snapshotted(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'labels' | 'lease'>, snapshot: string): void {
    this.add({ tenant: rec.tenant, type: 'snapshotted', data: { sandbox: rec.id, labels: rec.labels, lease: rec.lease ?? null, snapshot } });
  }

  /** A lease lapsed. */
  lapsed(l: LeaseRecord): void {
    this.add({ tenant: l.tenant, type: 'lease_lapsed', data: { sandbox: null, labels: l.labels, lease: l.id, onExpiry: l.onExpiry } });
  }

  private add(e: Omit<EventRecord, 'seq' | 'at'>): void {
    this.writes.add(e).catch((err: unknown) => this.logger.warn('a lifecycle event could not be recorded', { type: e.type, error: String(err) }));
  }

  /**
   * One sandbox's events after seq `since`, oldest first, at most MAX_SANDBOX_EVENTS: those
   * written, settled or not (a listing: a stream, which must miss none, waits for them to settle).
   */
  async ofSandbox(rec: Pick<SandboxRecord, 'id' | 'tenant'>, since = 0): Promise<LifecycleEvent[]> {
    return (await this.store.events.ofSandbox(rec.tenant, rec.id, since, MAX_SANDBOX_EVENTS)).map(eventView);
  }

  /**
   * A tenant's events after `since` (none given: from now on), in the order of their seq, until
   * `signal`: only those SETTLE_MS old, so that none numbered below one sent can still come (an
   * event's id is then a place to read again from that misses nothing).
   */
  async *stream(tenant: string, since: number | null, signal: AbortSignal): AsyncGenerator<EventRecord> {
    let cursor = since ?? (await this.store.events.last());
    while (!signal.aborted) {
      const rows = await this.store.events.after(tenant, cursor, 1000, this.timing.settleMs);
      for (const r of rows) {
        cursor = r.seq;
        yield r;
      }
      if (rows.length < 1000) await new Promise<void>((r) => setTimeout(r, this.timing.pollMs).unref());
    }
  }
}
