export interface InboxOptions<T> {
  /** What a value weighs (bytes of a chunk; 1 for an item). */
  size(v: T): number;
  /** Past this weight queued the source is paused (`pause`), and resumed once the reader has taken it below. */
  high: number;
  pause(): void;
  resume(): void;
  /** The reader stopped before the end (the source should stop sending). */
  stopped(): void;
}

/**
 * An async iterable fed by a source that pushes faster or slower than its one reader reads:
 * what is queued is bounded by pausing the source, an error ends the reading with it, and a
 * reader that stops early (`break`, `return`) tells the source.
 */
export class Inbox<T> implements AsyncIterable<T> {
  private readonly queue: T[] = [];
  private weight = 0;
  private paused = false;
  private ended = false;
  private failure: Error | null = null;
  private wake: (() => void) | null = null;
  private taken = false;

  constructor(private readonly o: InboxOptions<T>) {}

  push(v: T): void {
    if (this.ended) return;
    this.queue.push(v);
    this.weight += this.o.size(v);
    if (!this.paused && this.weight > this.o.high) {
      this.paused = true;
      this.o.pause();
    }
    this.wake?.();
  }

  /** The end of the values (`err`: the reading fails with it once what was queued is read). */
  end(err?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = err ?? null;
    this.wake?.();
    // Nothing more comes: the source is free for what follows (what is queued stays to be read).
    if (this.paused) {
      this.paused = false;
      this.o.resume();
    }
  }

  get done(): boolean {
    return this.ended;
  }

  /** Drops what is queued and what comes from now on (the source is resumed): nobody will read it. */
  discard(): void {
    this.ended = true;
    this.queue.length = 0;
    this.weight = 0;
    this.wake?.();
    if (this.paused) {
      this.paused = false;
      this.o.resume();
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.taken) throw new Error('an inbox has one reader');
    this.taken = true;
    return {
      next: async (): Promise<IteratorResult<T>> => {
        while (this.queue.length === 0 && !this.ended) await new Promise<void>((r) => (this.wake = r));
        this.wake = null;
        if (this.queue.length) {
          const v = this.queue.shift() as T;
          this.weight -= this.o.size(v);
          if (this.paused && this.weight <= this.o.high / 2) {
            this.paused = false;
            this.o.resume();
          }
          return { value: v, done: false };
        }
        if (this.failure) {
          const e = this.failure;
          this.failure = null;
          throw e;
        }
        return { value: undefined, done: true };
      },
      return: async (): Promise<IteratorResult<T>> => {
        const early = !this.ended;
        this.ended = true;
        this.queue.length = 0;
        this.weight = 0;
        this.wake?.();
        if (early) this.o.stopped();
        return { value: undefined, done: true };
      },
    };
  }
}
