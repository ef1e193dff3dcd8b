import { StringDecoder } from 'node:string_decoder';
import type { ExecEvent } from '@warren/api';

export type OutputStream = 'stdout' | 'stderr';

interface Chunk {
  stream: OutputStream;
  data: Buffer;
  /** Where it starts in the combined output. */
  start: number;
}

/**
 * The most bytes of output one event carries when output is replayed or read behind: a command
 * may hold 256 MiB, and a reader gets it in pieces, each when it asks for the next.
 */
export const MAX_EVENT_BYTES = 64 * 1024;

/**
 * A command's retained output (stdout and stderr in the order they came) and its final event,
 * read by any number of readers, each at its own pace: a reader holds a position in what is
 * retained, never a copy of it, so one that reads slowly (or not at all) costs nothing. The oldest
 * output may be dropped (trimTo): a reader behind it goes on from the oldest output retained.
 */
export class CommandOutput {
  /** Retained from `head` on; what is before it was dropped (the array is cut now and then, `cut` chunks so far). */
  private chunks: Chunk[] = [];
  private head = 0;
  private cut = 0;
  private bytes = 0;
  /** Bytes of output there were, retained or dropped. */
  private total = 0;
  private last: ExecEvent | null = null;
  /** Readers waiting for more output or the end. */
  private readonly wakers = new Set<() => void>();
  private settle: (ev: ExecEvent) => void = () => undefined;
  /** Resolves with the final event (exit or error). */
  readonly ended: Promise<ExecEvent> = new Promise((resolve) => (this.settle = resolve));

  /** Bytes retained. */
  get length(): number {
    return this.bytes;
  }

  /** The exit or error event, once there is one. */
  get final(): ExecEvent | null {
    return this.last;
  }

  add(stream: OutputStream, data: Buffer): void {
    this.chunks.push({ stream, data, start: this.total });
    this.bytes += data.length;
    this.total += data.length;
    this.wake();
  }

  /** Drops the oldest output, a chunk at a time, until at most `keep` bytes are retained; answers the bytes dropped. */
  trimTo(keep: number): number {
    let dropped = 0;
    while (this.bytes > keep && this.head < this.chunks.length) {
      const n = this.chunks[this.head++]!.data.length;
      this.bytes -= n;
      dropped += n;
    }
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.cut += this.head;
      this.head = 0;
    }
    return dropped;
  }

  /** The command is over: `ev` (exit or error) is the last event. */
  end(ev: ExecEvent): void {
    if (this.last) return;
    this.last = ev;
    this.settle(ev);
    this.wake();
  }

  /** The whole retained output of one stream. */
  text(stream: OutputStream): string {
    const mine: Buffer[] = [];
    for (let i = this.head; i < this.chunks.length; i++) if (this.chunks[i]!.stream === stream) mine.push(this.chunks[i]!.data);
    return Buffer.concat(mine).toString('utf8');
  }

  /**
   * The events from byte `offset` of the combined output on: what is retained, in order and in
   * pieces of at most MAX_EVENT_BYTES, then what comes as it comes, then the final event. The
   * next piece is taken only when the reader asks for it.
   */
  events(offset: number): AsyncIterable<ExecEvent> {
    return { [Symbol.asyncIterator]: () => this.reader(offset) };
  }

  private wake(): void {
    if (!this.wakers.size) return;
    const ws = [...this.wakers];
    this.wakers.clear();
    for (const w of ws) w();
  }

  private reader(offset: number): AsyncIterator<ExecEvent> {
    const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
    /** Where the reader is in the combined output, and the chunk it is in (counted over every chunk there was). */
    let pos = Math.max(0, offset);
    let index = 0;
    let flushed = false;
    const tail: ExecEvent[] = [];
    let over = false;
    let waker: (() => void) | null = null;

    /** The array index of the first retained chunk that ends past `pos`. */
    const find = (): number => {
      let i = Math.max(this.head, index - this.cut);
      while (i < this.chunks.length && this.chunks[i]!.start + this.chunks[i]!.data.length <= pos) i++;
      return i;
    };

    /** The next piece of one stream's retained bytes (same-stream chunks joined up to MAX_EVENT_BYTES), or null at the end of what is retained. */
    const piece = (): { stream: OutputStream; data: Buffer } | null => {
      const oldest = this.chunks[this.head]?.start ?? this.total;
      // What the reader had not read yet and was dropped: it goes on from the oldest retained.
      if (pos < oldest) pos = oldest;
      const parts: Buffer[] = [];
      let stream: OutputStream | null = null;
      let n = 0;
      let i = find();
      while (i < this.chunks.length && n < MAX_EVENT_BYTES) {
        const c = this.chunks[i]!;
        if (stream && c.stream !== stream) break;
        stream = c.stream;
        const at = pos - c.start;
        const k = Math.min(c.data.length - at, MAX_EVENT_BYTES - n);
        parts.push(c.data.subarray(at, at + k));
        pos += k;
        n += k;
        if (at + k >= c.data.length) i++;
      }
      index = i + this.cut;
      if (!stream) return null;
      return { stream, data: parts.length === 1 ? parts[0]! : Buffer.concat(parts) };
    };

    const next = async (): Promise<IteratorResult<ExecEvent>> => {
      for (;;) {
        if (over) return { value: undefined, done: true };
        const p = piece();
        if (p) {
          const data = decoders[p.stream].write(p.data);
          if (data) return { value: { type: p.stream, data }, done: false };
          continue;
        }
        const final = this.last;
        if (final) {
          // What a decoder still holds (a character cut at the end) goes before the final event.
          if (!flushed) {
            flushed = true;
            for (const s of ['stdout', 'stderr'] as const) {
              const data = decoders[s].end();
              if (data) tail.push({ type: s, data });
            }
            tail.push(final);
          }
          const ev = tail.shift();
          if (ev) return { value: ev, done: false };
          over = true;
          return { value: undefined, done: true };
        }
        await new Promise<void>((resolve) => {
          waker = resolve;
          this.wakers.add(resolve);
        });
        waker = null;
      }
    };

    return {
      next,
      return: async (): Promise<IteratorResult<ExecEvent>> => {
        over = true;
        const w = waker;
        if (w) {
          this.wakers.delete(w);
          w();
        }
        return { value: undefined, done: true };
      },
    };
  }
}
