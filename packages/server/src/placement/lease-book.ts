import type { EdgeLease } from '@warren/edge';
import type { LeaseRecord } from '../store/leases.js';

/** A lease as a node is told of it (its deadline on the store's clock, moved to the node's on the way). */
export function edgeLease(l: LeaseRecord): EdgeLease {
  return { id: l.id, generation: l.renewals, expiresAtMs: l.expiresAt, onExpiry: l.onExpiry, ...(l.state === 'active' ? {} : { ended: true }) };
}

/** The most active leases a replica keeps in mind (a create with one it forgot reads it again). */
const MAX_KEPT = 100_000;

/**
 * The active leases this replica knows, as nodes are told of them: a create's spec carries its
 * sandbox's lease from here (read from the store by the create itself, so never missing then).
 * Another replica's renewal may be newer than what is kept here: a node keeps the newer of two.
 */
export class LeaseBook {
  private readonly kept = new Map<string, EdgeLease>();

  /** Keeps what the store says of a lease now (an ended one is forgotten). */
  learn(l: LeaseRecord): EdgeLease {
    const e = edgeLease(l);
    if (e.ended) this.kept.delete(l.id);
    else if (this.kept.size < MAX_KEPT || this.kept.has(l.id)) this.kept.set(l.id, e);
    return e;
  }

  /** The lease a sandbox's spec carries (null: none, or not known here). */
  of(id: string | null | undefined): EdgeLease | null {
    return id ? (this.kept.get(id) ?? null) : null;
  }
}
