import type { EdgeApi, EdgeEvent } from '@warren/edge';

/**
 * Reads an edge's event stream and hands each event to `handle`, in order (the next once the
 * last one's handling resolved), until stopped. A stream that breaks (the edge is across a
 * network) is opened again after `retryMs`, from the last event handled: the edge holds its
 * recent events for that.
 * `reached(seq)` resolves once the events up to `seq` are handled (what a sweep waits for).
 */
export class EdgeEventReader {
  private seen = 0;
  private ended = false;
  private stopped = false;
  private readonly waiting: Array<{ seq: number; resolve: () => void }> = [];
  private it: AsyncIterator<EdgeEvent>;
  private readonly done: Promise<void>;
  private wake: (() => void) | null = null;

  constructor(
    private readonly edge: EdgeApi,
    private readonly handle: (ev: EdgeEvent) => void | Promise<void>,
    private readonly logger: { warn(msg: string, meta?: unknown): void },
    private readonly retryMs = 1000,
  ) {
    this.it = edge.events()[Symbol.asyncIterator]();
    this.done = this.run();
  }

  private async run(): Promise<void> {
    for (;;) {
      let r: IteratorResult<EdgeEvent>;
      try {
        r = await this.it.next();
        // An end nobody asked for is a stream that broke, too.
        if (r.done && !this.stopped) throw new Error('the stream ended');
      } catch (e) {
        if (this.stopped) break;
        this.logger.warn('the edge event stream failed; it is opened again', { error: String(e), after: this.seen });
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          setTimeout(resolve, this.retryMs).unref();
        });
        if (this.stopped) break;
        this.it = this.edge.events(this.seen)[Symbol.asyncIterator]();
        continue;
      }
      if (r.done) break;
      try {
        await this.handle(r.value);
      } catch (e) {
        this.logger.warn('an edge event was not handled', { event: r.value, error: String(e) });
      }
      this.seen = r.value.seq;
      for (let i = this.waiting.length - 1; i >= 0; i--) {
        const w = this.waiting[i]!;
        if (w.seq <= this.seen) {
          this.waiting.splice(i, 1);
          w.resolve();
        }
      }
    }
    this.ended = true;
    for (const w of this.waiting.splice(0)) w.resolve();
  }

  /** Resolves once the events numbered up to `seq` are handled (or the stream ended). */
  reached(seq: number): Promise<void> {
    if (seq <= this.seen || this.ended) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push({ seq, resolve }));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.it.return?.();
    await this.done;
  }
}
