import type { EdgeLease } from '@warren/edge';
import type { LeaseRecord } from '../store/leases.js';
import { RecentMap } from './recent-map.js';

/**
 * A lease as a node is told of it. Its deadline is sent as this replica's clock reads it (the
 * time the store said was left, from now): the edge protocol moves it to the node's clock, and
 * the store's clock, which set it, never has to agree with either.
 */
export function edgeLease(l: LeaseRecord, now = Date.now()): EdgeLease {
  return { id: l.id, generation: l.renewals, expiresAtMs: now + l.remainingMs, onExpiry: l.onExpiry, ...(l.state === 'active' ? {} : { ended: true }) };
}

/** The leases a replica keeps in mind at least (the most recently learned; at most twice as many). */
const MAX_KEPT = 100_000;

/**
 * The leases this replica learned lately (a create reads its lease from the store just before
 * its spec is sent, so it is always here then), as nodes are told of them. Another replica's
 * renewal may be newer than what is kept here: a node keeps the newer of two.
 */
export class LeaseBook {
  private readonly kept = new RecentMap<string, EdgeLease>(2 * MAX_KEPT);

  /** Keeps what the store says of a lease now. */
  learn(l: LeaseRecord): EdgeLease {
    const e = edgeLease(l);
    this.kept.set(l.id, e);
    return e;
  }

  /** The lease a sandbox's spec carries (null: none, or not learned lately). */
  of(id: string | null | undefined): EdgeLease | null {
    return id ? (this.kept.get(id) ?? null) : null;
  }
}
