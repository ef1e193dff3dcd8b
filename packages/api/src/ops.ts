import { z } from 'zod';

export const Quota = z.strictObject({
  sandboxes: z.number().int().min(0).optional(),
  cpu: z.number().min(0).optional(),
  memoryMiB: z.number().int().min(0).optional(),
  /**
   * The widest CIDR this key's sandboxes may allow, as a prefix length: 0 lets them allow any
   * address (0.0.0.0/0). Default for user keys 16; admin keys are not limited.
   */
  cidrMinPrefix: z.number().int().min(0).max(32).optional(),
});
/**
 * `admin`: everything, every tenant. `builder`: its tenant's sandboxes, and makes images (commit,
 * import, pull, layer upload). `runner`: its tenant's sandboxes and FnCalls; makes no images.
 * `user`: as builder (the role keys had before roles were split).
 */
export const KeyRole = z.enum(['admin', 'builder', 'runner', 'user']);
export type KeyRole = z.infer<typeof KeyRole>;
export const CreateKeyRequest = z.strictObject({
  tenant: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/),
  role: KeyRole.optional(),
  quota: Quota.optional(),
});
export type CreateKeyRequest = z.infer<typeof CreateKeyRequest>;
export const CreateKeyResponse = z.object({ key: z.string(), keyId: z.string(), tenant: z.string(), role: KeyRole });

/** One mutating call, as the audit log keeps it. */
export const AuditEntry = z.object({
  at: z.string(),
  /** `admin` for the bootstrap key, `k_` + 16 hex of its hash for the others; null when no key was valid. */
  keyId: z.string().nullable(),
  tenant: z.string().nullable(),
  method: z.string(),
  path: z.string(),
  sandbox: z.string().nullable(),
  status: z.number(),
  /** The error code when the call failed. */
  code: z.string().nullable(),
});
export const AuditQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(10_000).optional(),
  tenant: z.string().max(64).optional(),
  sandbox: z.string().max(64).optional(),
});
export const ListAuditResponse = z.object({ entries: z.array(AuditEntry) });
export type AuditEntry = z.infer<typeof AuditEntry>;

export const Node = z.object({
  id: z.string(),
  address: z.string(),
  state: z.enum(['ready', 'draining', 'down']),
  /**
   * cpu: the bound on running sandboxes' CPU limits together; busyCpu: the cores they may use
   * together (over ~10 s) before creates are refused (null: no such check).
   */
  capacity: z.object({ cpu: z.number(), busyCpu: z.number().nullable(), memoryMiB: z.number(), sandboxes: z.number() }),
  allocated: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  /** What admission counts: running sandboxes' requests, paused ones' resident memory. */
  committed: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  /** What the sandboxes use now: CPUs (over ~10 s), memory resident and in swap. */
  used: z.object({ cpu: z.number(), memoryMiB: z.number(), swapMiB: z.number() }),
  sandboxes: z.number(),
  paused: z.number(),
  lastHeartbeatAt: z.string(),
});
export const ListNodesResponse = z.object({ nodes: z.array(Node) });
export type ListNodesResponse = z.infer<typeof ListNodesResponse>;

export const Info = z.object({
  version: z.string(),
  backends: z.array(z.object({ name: z.string(), available: z.boolean(), accelerator: z.string().nullable() })),
  e2b: z.object({ apiUrl: z.string().nullable(), sandboxUrl: z.string().nullable() }),
});
export type Info = z.infer<typeof Info>;
