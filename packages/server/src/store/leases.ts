import type { LeaseOnExpiry, LeaseState } from '@warren/api';

/** A lease as the control plane keeps it. Times are the store's own clock (ms). */
export interface LeaseRecord {
  id: string;
  tenant: string;
  ttlSeconds: number;
  onExpiry: LeaseOnExpiry;
  labels: Record<string, string>;
  state: LeaseState;
  createdAt: number;
  /** When it lapses unless renewed (when it lapsed, once lapsed). */
  expiresAt: number;
  /** When it lapsed or was deleted; null while active. */
  endedAt: number | null;
  renewals: number;
  /** How long it had left when read, by the store's clock (negative: past its deadline). */
  remainingMs: number;
}

/** A lease's row as either store reads it (PostgreSQL answers BIGINTs as strings, SQLite its JSON as text). */
export interface LeaseRow {
  id: string;
  tenant: string;
  state: string;
  ttl_seconds: number;
  on_expiry: string;
  labels: string | Record<string, string>;
  created_at: number | string;
  expires_at: number | string;
  ended_at: number | string | null;
  renewals: number;
  remaining_ms: number | string;
}

/** A lease's record from its row. */
export const leaseFromRow = (r: LeaseRow): LeaseRecord => ({
  id: r.id,
  tenant: r.tenant,
  state: r.state as LeaseRecord['state'],
  ttlSeconds: r.ttl_seconds,
  onExpiry: r.on_expiry as LeaseRecord['onExpiry'],
  labels: typeof r.labels === 'string' ? (JSON.parse(r.labels) as Record<string, string>) : r.labels,
  createdAt: Number(r.created_at),
  expiresAt: Number(r.expires_at),
  endedAt: r.ended_at === null ? null : Number(r.ended_at),
  renewals: r.renewals,
  remainingMs: Number(r.remaining_ms),
});

/** The most leases one list answers. */
export const MAX_LEASES_LISTED = 1000;

/**
 * Leases in the control plane's store. Deadlines are set and checked by the store's clock, so
 * replicas whose clocks differ agree on when a lease lapses, and a renewal through any replica
 * moves it for all of them; a restart or a failover neither loses nor extends one.
 */
export interface LeaseStore {
  /** Records a new lease, lapsing `ttlSeconds` from now. */
  create(l: Pick<LeaseRecord, 'id' | 'tenant' | 'ttlSeconds' | 'onExpiry' | 'labels'>): Promise<LeaseRecord>;
  get(id: string): Promise<LeaseRecord | undefined>;
  /** A tenant's leases, newest first (at most MAX_LEASES_LISTED). */
  list(tenant: string, state?: LeaseState): Promise<LeaseRecord[]>;
  /**
   * Renews an active lease of `tenant` that is not past its deadline: `ttlSeconds` from now, one
   * renewal more. Undefined when it is not one (missing, another tenant's, lapsed or deleted).
   */
  renew(id: string, tenant: string, ttlSeconds: number): Promise<LeaseRecord | undefined>;
  /** Marks a lease of `tenant` deleted (if it is active); answers it as it is now (undefined: none of the tenant's). */
  remove(id: string, tenant: string): Promise<LeaseRecord | undefined>;
  /** Marks lapsed the active leases past their deadline (at most `limit`); answers those this call marked: one caller wins each. */
  lapse(limit: number): Promise<LeaseRecord[]>;
  /** The nodes that hold live sandboxes (creating, running, paused) of a lease. */
  nodes(id: string): Promise<string[]>;
  /**
   * Live sandboxes whose lease ended for good (deleted, or lapsed where it says delete), at most
   * `limit`: what a lapse or a delete has still to end (a create that raced it, a replica that died
   * halfway).
   */
  orphans(limit: number): Promise<Array<{ id: string; tenant: string; lease: string }>>;
}
