/** What the edge tells its owner, on its own initiative: plain data, numbered in order. */
export type EdgeEvent =
  | { seq: number; type: 'state'; id: string; paused: boolean; expiresAtMs: number | null; reason?: 'memory' }
  | { seq: number; type: 'expired'; id: string; reason: 'ttl' | 'idle' }
  | { seq: number; type: 'died'; id: string; reason?: 'exited' | 'oom'; detail?: string };

/** An event before it is numbered (what the lifecycle emits). */
export type EdgeEventBody = EdgeEvent extends infer E ? (E extends EdgeEvent ? Omit<E, 'seq'> : never) : never;

export type EdgeEventListener = (ev: EdgeEvent) => void;

/**
 * The edge's one event stream: numbered events, the latest `keep` held so that a subscriber that
 * reconnects (`after`: the last number it saw) misses nothing that recent.
 */
export class EdgeEvents {
  private readonly recent: EdgeEvent[] = [];
  private readonly listeners = new Set<EdgeEventListener>();
  private seq = 0;

  constructor(private readonly keep = 4096) {}

  /** The number of the latest event (0: none yet). */
  get last(): number {
    return this.seq;
  }

  emit(body: EdgeEventBody): void {
    const ev = { ...body, seq: ++this.seq } as EdgeEvent;
    this.recent.push(ev);
    if (this.recent.length > this.keep) this.recent.splice(0, this.recent.length - this.keep);
    for (const l of this.listeners) l(ev);
  }

  /**
   * Delivers the held events numbered above `after` (none: only new ones), then each new one;
   * returns the function that stops it.
   */
  subscribe(listener: EdgeEventListener, after?: number): () => void {
    if (after !== undefined) for (const ev of this.recent) if (ev.seq > after) listener(ev);
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
