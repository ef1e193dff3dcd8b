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
export const CreateKeyRequest = z.strictObject({
  tenant: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/),
  role: z.enum(['admin', 'user']).optional(),
  quota: Quota.optional(),
});
export type CreateKeyRequest = z.infer<typeof CreateKeyRequest>;
export const CreateKeyResponse = z.object({ key: z.string(), tenant: z.string(), role: z.enum(['admin', 'user']) });

export const Node = z.object({
  id: z.string(),
  address: z.string(),
  state: z.enum(['ready', 'draining', 'down']),
  capacity: z.object({ cpu: z.number(), memoryMiB: z.number(), sandboxes: z.number() }),
  allocated: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  /** What admission counts: running sandboxes' requests, paused ones' resident memory. */
  committed: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  /** What the sandboxes use now: CPUs (recent), memory resident and in swap. */
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
