import { randomBytes } from 'node:crypto';
import { WarrenError, type CreateLeaseRequest, type Lease, type LeaseState } from '@warren/api';
import type { Cluster } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';
import { edgeLease, type LeaseBook } from '../placement/lease-book.js';
import type { LeaseRecord } from '../store/leases.js';
import type { Store } from '../store/store.js';
import type { Caller } from './sandboxes.js';
import type { EventLog } from './events.js';

/** What ending a lease's sandboxes needs of the sandbox service. */
export interface LeaseSandboxes {
  readonly leases: LeaseBook;
  delete(caller: Caller, id: string, reason: 'lease'): Promise<void>;
}

export interface LeaseServiceOptions {
  logger: { info(msg: string, meta?: unknown): void; warn(msg: string, meta?: unknown): void };
  /** How often the store is swept for leases past their deadline (ms; default 250). */
  sweepMs?: number;
  /** Where a lapse is told (lifecycle events). */
  events?: EventLog;
}

/** Sandboxes of leases ended at once, all leases together (each a store write and a call to its node). */
const END_CONCURRENCY = 64;
/** Leases lapsed per sweep (the next sweep takes more). */
const LAPSE_BATCH = 100;
/** Every this many sweeps, live sandboxes of leases that ended for good are looked for (a create that raced the end, a replica that died halfway). */
const ORPHAN_SWEEPS = 8;
/** How long a node is given to take news of a lease (a renewal answers then, whatever a hung node does). */
const TELL_MS = 2000;

/** A lease as the API shows it. */
export function leaseView(l: LeaseRecord): Lease {
  return {
    id: l.id,
    state: l.state,
    ttlSeconds: l.ttlSeconds,
    onExpiry: l.onExpiry,
    labels: l.labels,
    createdAt: new Date(l.createdAt).toISOString(),
    expiresAt: new Date(l.expiresAt).toISOString(),
    endedAt: l.endedAt === null ? null : new Date(l.endedAt).toISOString(),
    renewals: l.renewals,
  };
}

/**
 * Leases: sandboxes made with one live only while it is renewed. Each node holding them keeps
 * the deadline and freezes them itself once it passes (EdgeLeases), control plane or not; every
 * replica sweeps the store for lapsed leases (one replica wins each), tells their nodes, and
 * removes the sandboxes of a lease that says delete. Deleting a lease ends its sandboxes at once.
 */
export class LeaseService {
  private timer: NodeJS.Timeout | null = null;
  private sweeping: Promise<void> | null = null;
  private closed = false;
  private sweeps = 0;
  /** Sandbox ends under way, and those waiting for a turn (END_CONCURRENCY at a time). */
  private ending = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly store: Store,
    private readonly cluster: Pick<Cluster, 'up'>,
    private readonly sandboxes: LeaseSandboxes,
    private readonly o: LeaseServiceOptions,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.o.sweepMs ?? 250);
    this.timer.unref();
  }

  async create(caller: Caller, req: CreateLeaseRequest): Promise<Lease> {
    const id = `ls_${randomBytes(10).toString('hex')}`;
    const l = await this.store.leases.create({
      id,
      tenant: caller.tenant,
      ttlSeconds: req.ttlSeconds,
      onExpiry: req.onExpiry ?? 'delete',
      labels: req.labels ?? {},
    });
    this.sandboxes.leases.learn(l);
    return leaseView(l);
  }

  async get(caller: Caller, id: string): Promise<Lease> {
    return leaseView(await this.record(caller, id));
  }

  async list(caller: Caller, state?: LeaseState): Promise<Lease[]> {
    return (await this.store.leases.list(caller.tenant, state)).map(leaseView);
  }

  /** Moves the deadline `ttlSeconds` (default the lease's own) from now, and tells the nodes holding its sandboxes before answering. */
  async renew(caller: Caller, id: string, ttlSeconds?: number): Promise<Lease> {
    const cur = await this.record(caller, id);
    const l = await this.store.leases.renew(id, cur.tenant, ttlSeconds ?? cur.ttlSeconds);
    if (!l) {
      const now = await this.record(caller, id);
      throw new WarrenError('conflict', `lease ${id} has ${now.state === 'deleted' ? 'been deleted' : 'lapsed'}: it can no longer be renewed`, {
        lease: id,
        state: now.state === 'active' ? 'lapsed' : now.state,
      });
    }
    this.sandboxes.leases.learn(l);
    await this.tell(l);
    return leaseView(l);
  }

  /** Ends a lease and every sandbox made with it (idempotent). */
  async delete(caller: Caller, id: string): Promise<void> {
    const cur = await this.record(caller, id);
    const l = (await this.store.leases.remove(id, cur.tenant)) ?? cur;
    this.sandboxes.leases.learn(l);
    await this.tell(l);
    await this.endSandboxes(l);
  }

  /** Lapses what is past its deadline in the store: its nodes told (they froze the sandboxes already), its sandboxes removed when it says delete. */
  sweep(): Promise<void> {
    return (this.sweeping ??= (async () => {
      try {
        for (;;) {
          const lapsed = await this.store.leases.lapse(LAPSE_BATCH);
          await Promise.all(
            lapsed.map(async (l) => {
              this.o.logger.info('lease lapsed', { lease: l.id, tenant: l.tenant, onExpiry: l.onExpiry });
              this.o.events?.lapsed(l);
              this.sandboxes.leases.learn(l);
              await this.tell(l);
              if (l.onExpiry === 'delete') await this.endSandboxes(l);
            }),
          );
          if (lapsed.length < LAPSE_BATCH || this.closed) break;
        }
        if (++this.sweeps % ORPHAN_SWEEPS === 0) await this.endOrphans();
      } catch (e) {
        if (!this.closed) this.o.logger.warn('the leases could not be swept', { error: String(e) });
      } finally {
        this.sweeping = null;
      }
    })());
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.sweeping;
  }

  /** The caller's lease (an admin's: any); not_found otherwise. */
  private async record(caller: Caller, id: string): Promise<LeaseRecord> {
    const l = await this.store.leases.get(id);
    if (!l || (l.tenant !== caller.tenant && caller.role !== 'admin')) throw new WarrenError('not_found', `lease ${id} does not exist`, { lease: id });
    return l;
  }

  /**
   * Tells the nodes holding the lease's sandboxes what the store says of it now, each within
   * TELL_MS (a node unreachable or slow keeps what it knew: it freezes them at the old deadline,
   * and thaws them when the news comes).
   */
  private async tell(l: LeaseRecord): Promise<void> {
    const nodes = new Set(await this.store.leases.nodes(l.id));
    const told = edgeLease(l);
    await Promise.all(
      this.cluster
        .up()
        .filter((n) => nodes.has(n.id))
        .map((n) =>
          within(Math.min(TELL_MS, l.ttlSeconds * 250), `node ${n.id}`, n.api.leasesSet([told])).catch((e: unknown) =>
            this.o.logger.warn('a node could not be told of a lease', { node: n.id, lease: l.id, error: String(e) }),
          ),
        ),
    );
  }

  /** Removes the live sandboxes of a lease. */
  private async endSandboxes(l: LeaseRecord): Promise<void> {
    const recs = await this.store.listSandboxes({ tenant: l.tenant, lease: l.id, states: ['creating', 'running', 'paused'], limit: 1_000_000 });
    await Promise.all(recs.map((r) => this.end(l.tenant, l.id, r.id)));
  }

  /** Ends what a lapse or a delete left live (a create that raced it, a replica that died halfway). */
  private async endOrphans(): Promise<void> {
    const left = await this.store.leases.orphans(1000);
    await Promise.all(left.map((x) => this.end(x.tenant, x.lease, x.id)));
  }

  /** Ends one sandbox of a lease, END_CONCURRENCY at a time over all leases. */
  private async end(tenant: string, lease: string, id: string): Promise<void> {
    if (this.ending >= END_CONCURRENCY) await new Promise<void>((r) => this.waiting.push(r));
    this.ending++;
    try {
      await this.sandboxes.delete({ tenant, role: 'runner', quota: {}, keyId: `lease:${lease}` }, id, 'lease');
    } catch (e) {
      if (!(e instanceof WarrenError && e.code === 'not_found')) this.o.logger.warn('a lease’s sandbox could not be ended', { lease, id, error: String(e) });
    } finally {
      this.ending--;
      this.waiting.shift()?.();
    }
  }
}
