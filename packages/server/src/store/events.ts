/** A lifecycle event as kept: `data` is what the API shows of it but its seq, type and time. */
export interface EventRecord {
  seq: number;
  tenant: string;
  /** The store's clock (ms). */
  at: number;
  type: string;
  data: Record<string, unknown>;
}

/**
 * Lifecycle events in the control plane's store: appended by every replica, read by any, in the
 * order of `seq`. Two replicas' events may commit out of that order for a moment (PostgreSQL's
 * sequence numbers an insert before it commits), so a reader takes only events older than a
 * settling time: those, in order, are all there will ever be below their seq.
 */
export interface EventStore {
  /** Appends events (one statement). */
  append(events: Array<Omit<EventRecord, 'seq' | 'at'>>): Promise<void>;
  /**
   * A tenant's events (null: every tenant's, what the operator's webhooks read) after `seq` and at
   * least `settledMs` old (the store's clock), in order, at most `limit`.
   */
  after(tenant: string | null, seq: number, limit: number, settledMs?: number): Promise<EventRecord[]>;
  /**
   * One sandbox's events (of `tenant`) after `seq`, in order, at most `limit`, settled or not: a
   * listing, not a stream. A `forked` event is its source's (its children have their own).
   */
  ofSandbox(tenant: string, sandbox: string, seq: number, limit: number): Promise<EventRecord[]>;
  /** The newest seq of all (0: none): where a stream with no `since` begins. */
  last(): Promise<number>;
  /** The oldest seq kept (0: none): a reader behind it lost what was pruned. */
  first(): Promise<number>;
  /** Removes events older than `ms`, at most 5,000 a call (a short write); answers how many. */
  prune(ms: number): Promise<number>;
}
