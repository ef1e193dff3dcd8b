import { WarrenError } from '@warren/api';

/**
 * The frames of the edge protocol (docs/edge-api.md, "Transports"): a 4-byte big-endian
 * payload length, a 1-byte type, the payload. One call at a time on a connection:
 * - `call` (to the edge): `{"c": name, "a": args}`;
 * - `data`: bytes of a body (a file or tar to the edge, or one from it);
 * - `end`: the end of a body or of a stream of items;
 * - `result` (from the edge): `{"r": value}`; for a body out or a stream it comes first;
 * - `item` (from the edge): one value of a stream (a command's events, the edge's events);
 * - `error` (from the edge): `{"s": status, "b": error body}`; the call is over.
 */
export const FRAME = { call: 1, data: 2, end: 3, result: 4, item: 5, error: 6 } as const;
export type FrameType = (typeof FRAME)[keyof typeof FRAME];

const HEADER = 5;

/** A frame carrying `text` (UTF-8), written into one buffer with its header. */
export function textFrame(type: FrameType, text: string): Buffer {
  const n = Buffer.byteLength(text);
  const b = Buffer.allocUnsafe(HEADER + n);
  b.writeUInt32BE(n, 0);
  b[4] = type;
  b.write(text, HEADER);
  return b;
}

/** The header of a frame whose payload is `n` bytes written after it (a body's bytes are not copied). */
export function frameHeader(type: FrameType, n: number): Buffer {
  const b = Buffer.allocUnsafe(HEADER);
  b.writeUInt32BE(n, 0);
  b[4] = type;
  return b;
}

/** An `end` frame. */
export const END_FRAME: Buffer = frameHeader(FRAME.end, 0);

/** The largest `data` frame a sender writes; a bigger body goes as several. */
export const MAX_DATA_FRAME = 1 << 20;

/**
 * Frames out of a byte stream as it arrives: chunks are kept as they come and joined once per
 * frame, so a large frame costs one copy, not one per chunk; a `data` frame's bytes are handed
 * on as they arrive, in one or more pieces, with no copy. A length over `maxPayload` or an
 * unknown type is a broken peer: `push` throws and the connection must go.
 */
export class FrameReader {
  private readonly parts: Buffer[] = [];
  private have = 0;
  private need = -1;
  private type = 0;
  private detached = false;

  constructor(private readonly maxPayload: number) {}

  /** Takes a chunk; calls `frame` for each frame it completes, in order. */
  push(chunk: Buffer, frame: (type: FrameType, payload: Buffer) => void): void {
    if (this.detached) throw new Error('a frame reader takes nothing after its stream became raw bytes');
    this.parts.push(chunk);
    this.have += chunk.length;
    for (;;) {
      if (this.detached) return;
      if (this.need < 0) {
        if (this.have < HEADER) return;
        const h = this.take(HEADER);
        const n = h.readUInt32BE(0);
        const t = h[4]!;
        if (t < FRAME.call || t > FRAME.error) throw new WarrenError('unavailable', `the edge protocol has no frame type ${t}`);
        if (n > this.maxPayload) throw new WarrenError('unavailable', `an edge protocol frame of ${n} bytes is over the ${this.maxPayload} allowed`);
        this.need = n;
        this.type = t;
      }
      if (this.type === FRAME.data) {
        // A body's bytes go on as they arrive, never joined: a frame of them is a stream's part.
        while (this.need > 0 && this.have > 0) {
          const piece = this.take(Math.min(this.need, this.parts[0]!.length));
          this.need -= piece.length;
          frame(FRAME.data, piece);
        }
        if (this.need > 0) return;
        this.need = -1;
        continue;
      }
      if (this.have < this.need) return;
      const payload = this.take(this.need);
      this.need = -1;
      frame(this.type as FrameType, payload);
    }
  }

  /**
   * Ends the frames (called from `frame`, on the frame after which the stream carries raw bytes,
   * a tunnel's): answers the bytes held past that frame, which are the raw stream's first.
   */
  detach(): Buffer {
    this.detached = true;
    const rest = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts);
    this.parts.length = 0;
    this.have = 0;
    return rest;
  }

  /** The next `n` bytes held (there are at least `n`). */
  private take(n: number): Buffer {
    this.have -= n;
    const first = this.parts[0];
    if (n === 0) return Buffer.alloc(0);
    if (first && first.length >= n) {
      if (first.length === n) this.parts.shift();
      else this.parts[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let got = 0;
    while (got < n) {
      const p = this.parts[0]!;
      const k = Math.min(p.length, n - got);
      p.copy(out, got, 0, k);
      got += k;
      if (k === p.length) this.parts.shift();
      else this.parts[0] = p.subarray(k);
    }
    return out;
  }
}
