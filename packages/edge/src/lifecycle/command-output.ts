import { StringDecoder } from 'node:string_decoder';
import type { ExecEvent } from '@warren/api';

export type OutputStream = 'stdout' | 'stderr';

interface Chunk {
  stream: OutputStream;
  data: Buffer;
}

/**
 * The most bytes of output one event carries when output is replayed or read behind: a command
 * may hold 256 MiB, and a reader gets it in pieces, each when it asks for the next.
 */
export const MAX_EVENT_BYTES = 64 * 1024;

/**
 * A command's retained output (stdout and stderr in the order they came) and its final event,
 * read by any number of readers, each at its own pace: a reader holds a position in what is
 * retained, never a copy of it, so one that reads slowly (or not at all) costs nothing.
 */
export class CommandOutput {
  private readonly chunks: Chunk[] = [];
  private bytes = 0;
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
    this.chunks.push({ stream, data });
    this.bytes += data.length;
    this.wake();
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
    return Buffer.concat(this.chunks.filter((c) => c.stream === stream).map((c) => c.data)).toString('utf8');
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
    let skip = Math.max(0, offset);
    /** Where the reader is: chunk `index`, byte `at` in it. */
    let index = 0;
    let at = 0;
    let flushed = false;
    const tail: ExecEvent[] = [];
    let over = false;
    let waker: (() => void) | null = null;

    /** The next piece of one stream's retained bytes (same-stream chunks joined up to MAX_EVENT_BYTES), or null at the end of what is retained. */
    const piece = (): { stream: OutputStream; data: Buffer } | null => {
      const parts: Buffer[] = [];
      let stream: OutputStream | null = null;
      let n = 0;
      while (index < this.chunks.length && n < MAX_EVENT_BYTES) {
        const c = this.chunks[index]!;
        if (stream && c.stream !== stream) break;
        let k = Math.min(c.data.length - at, MAX_EVENT_BYTES - n);
        if (skip > 0) {
          const dropped = Math.min(skip, k);
          skip -= dropped;
          at += dropped;
          k -= dropped;
        } else if (k > 0) {
          stream = c.stream;
          parts.push(c.data.subarray(at, at + k));
          at += k;
          n += k;
        }
        if (at >= c.data.length) {
          index++;
          at = 0;
        }
      }
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
