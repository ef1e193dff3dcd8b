import { z } from 'zod';
import { Labels } from './sandbox.js';

/** What happens to a lease's sandboxes when it lapses: removed, or paused (kept, frozen, memory given back). */
export const LeaseOnExpiry = z.enum(['delete', 'pause']);
export type LeaseOnExpiry = z.infer<typeof LeaseOnExpiry>;

const leaseTtl = z.number().int().min(1).max(86_400);

/**
 * A lease: sandboxes made with it live only while it is renewed. A trainer that holds one and
 * dies (even by SIGKILL) leaves nothing running past its TTL: within a second of the lapse every
 * sandbox holding it is frozen on its node, then paused or deleted (`onExpiry`).
 */
export const CreateLeaseRequest = z.strictObject({
  ttlSeconds: leaseTtl,
  onExpiry: LeaseOnExpiry.optional().meta({ default: 'delete' }),
  labels: Labels.optional(),
});
export type CreateLeaseRequest = z.infer<typeof CreateLeaseRequest>;

/** A renewal: the lease lives `ttlSeconds` from now (default: its own TTL). */
export const RenewLeaseRequest = z.strictObject({ ttlSeconds: leaseTtl.optional() });
export type RenewLeaseRequest = z.infer<typeof RenewLeaseRequest>;

export const LeaseState = z.enum(['active', 'lapsed', 'deleted']);
export type LeaseState = z.infer<typeof LeaseState>;

export const Lease = z.object({
  id: z.string(),
  state: LeaseState,
  ttlSeconds: z.number(),
  onExpiry: LeaseOnExpiry,
  labels: z.record(z.string(), z.string()),
  createdAt: z.string(),
  /** When it lapses unless renewed (when it lapsed, for a lapsed one). */
  expiresAt: z.string(),
  /** When it lapsed or was deleted (null: active). */
  endedAt: z.string().nullable(),
  /** Its renewals so far. */
  renewals: z.number(),
});
export type Lease = z.infer<typeof Lease>;

export const ListLeasesQuery = z.strictObject({ state: LeaseState.optional() });
export const ListLeasesResponse = z.object({ leases: z.array(Lease) });
