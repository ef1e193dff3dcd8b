import { ROUTES, WarrenError, type CreateLeaseRequest, type Lease as LeaseInfo, type LeaseState } from '@warren/api';
import type { Transport } from './transport.js';

export interface LeaseOptions {
  /**
   * Renew it from a background timer (default true), every third of its TTL: while this process
   * lives its sandboxes do; killed (even with SIGKILL), the renewals stop and they end within its
   * TTL and a second. The timer does not keep the process alive.
   */
  keepAlive?: boolean;
  /** Told of a renewal that failed (the timer tries again at its next turn; a lapsed lease stops it). */
  onError?: (e: unknown) => void;
}

/**
 * A lease: create sandboxes with `lease: lease.id` and they live only while it is renewed.
 * @example
 * await using lease = await warren.leases.create({ ttlSeconds: 30 });
 * const sb = await warren.sandboxes.create({ image: 'debian-python:latest', lease: lease.id });
 * // leaving the block deletes the lease, and with it every sandbox made with it
 */
export class Lease {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly t: Transport,
    /** The lease as last read (renewals update it). */
    public info: LeaseInfo,
  ) {}

  get id(): string {
    return this.info.id;
  }

  /**
   * Moves its deadline `ttlSeconds` (default its own TTL) from now; conflict once it lapsed or was
   * deleted. `signal` bounds the wait (the background renewer gives each try a third of the TTL).
   */
  async renew(ttlSeconds?: number, signal?: AbortSignal): Promise<LeaseInfo> {
    this.info = await this.t.json(ROUTES.renewLease, { id: this.id }, { json: ttlSeconds === undefined ? {} : { ttlSeconds }, signal });
    return this.info;
  }

  /** Renews it every third of its TTL until `stop` (or `delete`); a try not answered by the next turn is given up for it. */
  keepAlive(o: Pick<LeaseOptions, 'onError'> = {}): void {
    if (this.timer) return;
    const everyMs = Math.max(100, Math.round((this.info.ttlSeconds * 1000) / 3));
    let inFlight = false;
    this.timer = setInterval(() => {
      if (inFlight) return;
      inFlight = true;
      this.renew(undefined, AbortSignal.timeout(everyMs))
        .catch((e: unknown) => {
          if (e instanceof WarrenError && (e.code === 'conflict' || e.code === 'not_found')) this.stop();
          o.onError?.(e);
        })
        .finally(() => (inFlight = false));
    }, everyMs);
    this.timer.unref();
  }

  /** Stops renewing: the lease lapses at its deadline. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Ends the lease and every sandbox made with it, at once (idempotent). */
  async delete(): Promise<void> {
    this.stop();
    await this.t.empty(ROUTES.deleteLease, { id: this.id });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete();
  }
}

/** Leases: what keeps a job's sandboxes alive, so that a job that dies leaves none running. */
export class Leases {
  constructor(private readonly t: Transport) {}

  /** Takes a lease, renewed in the background unless `keepAlive: false`. */
  async create(req: CreateLeaseRequest, o: LeaseOptions = {}): Promise<Lease> {
    const lease = new Lease(this.t, await this.t.json(ROUTES.createLease, {}, { json: req }));
    if (o.keepAlive ?? true) lease.keepAlive(o);
    return lease;
  }

  /** A lease by id (from any process), not renewed by this one until `keepAlive`. */
  async get(id: string): Promise<Lease> {
    return new Lease(this.t, await this.t.json(ROUTES.getLease, { id }));
  }

  async list(state?: LeaseState): Promise<LeaseInfo[]> {
    return (await this.t.json(ROUTES.listLeases, {}, { query: { state } })).leases;
  }
}
