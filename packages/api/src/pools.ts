import { z } from 'zod';
import { NetworkPolicy } from './network.js';
import { Resources, ResourcesView } from './sandbox.js';

const name = z.string().min(1).max(256);

/**
 * A warm pool: `size` sandboxes of one spec kept ready on the node. A create of the pool's
 * tenant whose image, layers, resources and network match claims one of them instead of making
 * one (its env, files, user, workdir, labels and lifetime are applied then).
 */
export const CreatePoolRequest = z.strictObject({
  image: name,
  layers: z.array(name).max(120).optional(),
  resources: Resources.optional(),
  network: NetworkPolicy.optional(),
  size: z.number().int().min(1).max(1000),
});
export type CreatePoolRequest = z.infer<typeof CreatePoolRequest>;

export const Pool = z.object({
  id: z.string(),
  image: z.string(),
  layers: z.array(z.string()),
  resources: ResourcesView,
  network: z.object({ egress: z.enum(['deny', 'allow']), allow: z.array(z.string()), deny: z.array(z.string()) }),
  size: z.number(),
  /** Sandboxes ready to be claimed now. */
  ready: z.number(),
  /** Creates that took one of them, since the pool was made (or the node started). */
  claims: z.number(),
  /** Claims per second over the last 10 seconds. */
  claimsPerSecond: z.number(),
  /** The last reason the pool could not be refilled (e.g. the node is full), or null. */
  lastError: z.string().nullable(),
  createdAt: z.string(),
});
export type Pool = z.infer<typeof Pool>;

export const ListPoolsResponse = z.object({ pools: z.array(Pool) });
