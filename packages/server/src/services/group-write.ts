export interface GroupWriteOptions {
  /** The most items one write takes (default 1000). */
  max?: number;
  /**
   * What the first write waits for before it goes (default: nothing), so that writes nobody waits
   * on (heartbeats) go together even when they come one at a time: e.g. a timer of 100 ms.
   */
  linger?: () => Promise<void>;
}

/**
 * Group commit: the first write goes at once (or after `linger`); writes asked for while it is in
 * flight wait and go together in the next one (at most `max` each), so a burst of creates costs
 * a few database round trips instead of one each, and a lone create waits for nothing but its
 * linger (the creates' own: the rest of the event loop's turn, create-writes.ts). `write`
 * answers each item's outcome in order (one item's failure need not fail the others).
 * @example
 * const starts = new GroupWrite((ids: string[]) => store.markStarted(ids).then(...));
 * await starts.add(id);
 */
export class GroupWrite<T, R> {
  private readonly queue: Array<{ item: T; resolve: (r: R) => void; reject: (e: unknown) => void }> = [];
  private running = false;

  constructor(
    private readonly write: (items: T[]) => Promise<Array<PromiseSettledResult<R>>>,
    private readonly o: GroupWriteOptions = {},
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      if (this.o.linger) await this.o.linger().catch(() => undefined);
      while (this.queue.length) {
        const group = this.queue.splice(0, this.o.max ?? 1000);
        let out: Array<PromiseSettledResult<R>>;
        try {
          out = await this.write(group.map((g) => g.item));
        } catch (e) {
          out = group.map(() => ({ status: 'rejected', reason: e }));
        }
        group.forEach((g, i) => {
          const r = out[i];
          if (r?.status === 'fulfilled') g.resolve(r.value);
          else g.reject(r ? r.reason : new Error('the group write answered no outcome'));
        });
      }
    } finally {
      this.running = false;
    }
  }
}
