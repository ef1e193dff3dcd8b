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
 * order of `seq` (PostgreSQL's sequence: two replicas' events may commit out of it for a moment,
 * which the reader allows for).
 */
export interface EventStore {
  /** Appends events (one statement). */
  append(events: Array<Omit<EventRecord, 'seq' | 'at'>>): Promise<void>;
  /** A tenant's events after `seq`, in order, at most `limit`. */
  after(tenant: string, seq: number, limit: number): Promise<EventRecord[]>;
  /** The newest seq of all (0: none): where a stream with no `since` begins. */
  last(): Promise<number>;
  /** Removes the events older than `ms`; answers how many. */
  prune(ms: number): Promise<number>;
}
