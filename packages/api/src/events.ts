import { z } from 'zod';
import { SandboxEnd } from './sandbox.js';

/**
 * What a lifecycle event says happened: a sandbox `created` (recorded, being made), `started`
 * (running), `paused`, `resumed`, `forked` (its children made), `snapshotted` (a snapshot of it
 * kept), `ended` (with its end: why, whose doing), or a `lease_lapsed`.
 */
export const LifecycleEventType = z.enum(['created', 'started', 'paused', 'resumed', 'forked', 'snapshotted', 'ended', 'lease_lapsed']);
export type LifecycleEventType = z.infer<typeof LifecycleEventType>;

/**
 * One lifecycle event, as `GET /v1/events` streams it (server-sent events: its `id` is `seq`, its
 * `event` is `type`, its `data` this object as JSON).
 */
export const LifecycleEvent = z.object({
  seq: z.number().int(),
  type: LifecycleEventType,
  at: z.string(),
  /** The sandbox it is of (null: a lease's). */
  sandbox: z.string().nullable(),
  labels: z.record(z.string(), z.string()),
  lease: z.string().nullable(),
  /** An `ended` event's end. */
  end: SandboxEnd.optional(),
  /** A `forked` event's children (each also has its own `created` and `started`). */
  children: z.array(z.string()).optional(),
  /** A `snapshotted` event's snapshot. */
  snapshot: z.string().optional(),
  /** A `paused` event's cause when it was not a call's: `memory` (its node ran short and it was idle the longest). */
  reason: z.enum(['memory']).optional(),
  /** A `lease_lapsed` event's lease: what it does to its sandboxes. */
  onExpiry: z.enum(['delete', 'pause']).optional(),
});
export type LifecycleEvent = z.infer<typeof LifecycleEvent>;

export const EventsQuery = z.strictObject({
  label: z
    .array(z.string().regex(/^[^=]+=.*$/, 'label filters are key=value'))
    .max(16)
    .optional(),
  /** Events after this seq (a stream read again from the last `id` it gave; `Last-Event-ID` says the same). */
  since: z.coerce.number().int().min(0).optional(),
});
export type EventsQuery = z.infer<typeof EventsQuery>;

/** The most events `GET /v1/sandboxes/{id}/events` answers at once (the oldest first: read on with `since`). */
export const MAX_SANDBOX_EVENTS = 1000;

export const SandboxEventsQuery = z.strictObject({
  /** Events after this seq (the last one of a previous answer). */
  since: z.coerce.number().int().min(0).optional(),
});
export type SandboxEventsQuery = z.infer<typeof SandboxEventsQuery>;

/** One sandbox's lifecycle events as kept, oldest first (a `forked` event is the source's; its children have their own). */
export const SandboxEventsResponse = z.object({ events: z.array(LifecycleEvent) });
export type SandboxEventsResponse = z.infer<typeof SandboxEventsResponse>;

/** One event as a webhook delivers it: a lifecycle event and its tenant (the operator's hook sees every tenant's). */
export const WebhookEvent = LifecycleEvent.extend({ tenant: z.string() });
export type WebhookEvent = z.infer<typeof WebhookEvent>;

/**
 * A webhook's POST body: events in the order of their seq, each delivered at least once (a
 * receiver drops a seq it has seen). Its headers: `Warren-Event-Ids` (their seqs, comma-separated)
 * and `Warren-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the secret>`.
 */
export const WebhookBody = z.object({ events: z.array(WebhookEvent) });
export type WebhookBody = z.infer<typeof WebhookBody>;
