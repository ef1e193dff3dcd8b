import { z } from 'zod';
import { ApiErrorObject, Labels, Lifetime, Sandbox } from './sandbox.js';

/** The most sandboxes one fork makes. */
export const MAX_FORK_COUNT = 100;

/**
 * A fork: `count` new sandboxes with the source's filesystem state as it is at the call (its
 * writable layer frozen once, shared read-only by every child, each child writing to a layer of
 * its own), on the source's node. A running or paused source may be forked; it runs on (a paused
 * one stays paused). A container's running processes are not copied: a child's commands and
 * sessions start fresh, with the source's image, env, user and workdir. A microVM's children
 * resume its memory and devices too (its processes run on in each), each with its own hostname,
 * address, randomness and clock. Each child has the source's image, env, user, workdir, network
 * rules and resources, and the lifetime, labels and lease given here (labels: the source's when
 * none are given; lifetime: the node's defaults when none is given).
 */
export const ForkRequest = z.strictObject({
  count: z.number().int().min(1).max(MAX_FORK_COUNT).optional().meta({ default: 1 }),
  labels: Labels.optional(),
  lifetime: Lifetime.optional(),
  /** A lease of the caller's: the children live only while it is renewed. */
  lease: z.string().min(1).max(64).optional(),
  /** The children's CPU (a container's memory too); a microVM's memory is its source's. */
  resources: z
    .strictObject({
      cpu: z.number().positive().max(1024).optional(),
      memoryMiB: z
        .number()
        .int()
        .min(16)
        .max(4 * 1024 * 1024)
        .optional(),
      /** What the node commits for each child (default: the source's, or the default share of a new memoryMiB). */
      memoryRequestMiB: z
        .number()
        .int()
        .min(1)
        .max(4 * 1024 * 1024)
        .optional(),
    })
    .optional(),
});
export type ForkRequest = z.infer<typeof ForkRequest>;

/** The children made, and why each of the others was not (the node full, say): all-or-report as a batch create. */
export const ForkResponse = z.object({
  source: z.string(),
  sandboxes: z.array(Sandbox),
  errors: z.array(ApiErrorObject),
});
export type ForkResponse = z.infer<typeof ForkResponse>;
