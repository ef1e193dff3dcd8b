import { createHash, randomBytes } from 'node:crypto';

/**
 * WebSocket framing (RFC 6455) as pure functions, for the terminal (`GET /v1/sandboxes/{id}/pty`):
 * the server's side and the clients' (the SDK, `warren shell`). No extensions, no subprotocols.
 * Warren's own rather than the `ws` package's: the terminal needs a few hundred lines of it, both
 * ends share them, and what bounds a hostile peer (message bytes, frames per message, bytes held
 * per partial frame) is here to test as pure code. `ws` runs only on Node, as this does, and
 * bounded tiny fragments and chunks itself only from 8.21 (May 2026), empty fragments after it.
 */

export const WS_OPCODE = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;

/** One whole message (fragments joined) or control frame. */
export interface WsMessage {
  opcode: number;
  payload: Buffer;
}

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/** The `Sec-WebSocket-Accept` answer to a `Sec-WebSocket-Key`. */
export function wsAccept(key: string): string {
  return createHash('sha1')
    .update(key + GUID)
    .digest('base64');
}

/** A new `Sec-WebSocket-Key` (a client's). */
export function wsKey(): string {
  return randomBytes(16).toString('base64');
}

/** One frame, whole (FIN set); `mask`: a client's frames are masked, a server's are not. */
export function wsFrame(opcode: number, payload: Buffer, mask: boolean): Buffer {
  const len = payload.length;
  const head = len < 126 ? 2 : len < 65536 ? 4 : 10;
  const out = Buffer.allocUnsafe(head + (mask ? 4 : 0) + len);
  out[0] = 0x80 | opcode;
  if (len < 126) out[1] = len;
  else if (len < 65536) {
    out[1] = 126;
    out.writeUInt16BE(len, 2);
  } else {
    out[1] = 127;
    out.writeBigUInt64BE(BigInt(len), 2);
  }
  if (!mask) {
    payload.copy(out, head);
    return out;
  }
  out[1] |= 0x80;
  const key = randomBytes(4);
  key.copy(out, head);
  for (let i = 0; i < len; i++) out[head + 4 + i] = payload[i]! ^ key[i & 3]!;
  return out;
}

/** A close frame's payload: its code and a reason (at most 123 bytes of it). */
export function wsClosePayload(code: number, reason = ''): Buffer {
  const r = Buffer.from(reason).subarray(0, 123);
  const b = Buffer.alloc(2 + r.length);
  b.writeUInt16BE(code, 0);
  r.copy(b, 2);
  return b;
}

export class WsProtocolError extends Error {
  constructor(
    message: string,
    /** The close code to answer with (1002 protocol error, 1009 too big). */
    readonly closeCode: number,
  ) {
    super(message);
  }
}

const EMPTY = Buffer.alloc(0);

/** The most frames one message may come in (its first and its continuations, empty ones too). */
export const WS_MAX_FRAGMENTS = 1024;

/**
 * Turns bytes from one side of a WebSocket into messages. `masked`: whether that side's frames
 * must be masked (a client's must, a server's must not). A message (its fragments together)
 * longer than `maxMessageBytes`, or in more than `maxFragments` frames, is an error, as is anything
 * RFC 6455 forbids that matters here. What it holds is bounded by those two: one partial frame, one
 * partial message.
 */
export class WsDecoder {
  /**
   * Bytes not yet read: `acc[start, end)`. Each chunk is copied in once (the space doubles when it
   * must grow), so a frame sent in many small pieces costs neither a copy of all before it per
   * piece nor an object per piece.
   */
  private acc: Buffer = EMPTY;
  private start = 0;
  private end = 0;
  /** How many bytes the frame at the front needs before it can be read (its header, then all of it). */
  private need = 2;
  private fragments: Buffer[] = [];
  private fragmentCount = 0;
  private fragmentBytes = 0;
  private fragmentOpcode = -1;

  constructor(
    private readonly masked: boolean,
    private readonly maxMessageBytes = 1024 * 1024,
    private readonly maxFragments = WS_MAX_FRAGMENTS,
  ) {}

  /** Messages whole in what has come so far; throws WsProtocolError on a frame it cannot take. */
  push(chunk: Buffer): WsMessage[] {
    // With nothing buffered the frames are read from the chunk itself, and only what is left of it copied.
    const borrowed = this.start === this.end;
    if (borrowed) {
      this.acc = chunk;
      this.start = 0;
      this.end = chunk.length;
    } else this.take(chunk);
    const out: WsMessage[] = [];
    while (this.end - this.start >= this.need) {
      const f = this.frame(this.acc.subarray(this.start, this.end));
      if (!f) continue;
      const m = this.message(f);
      if (m) out.push(m);
    }
    const live = this.end - this.start;
    if (live === 0) {
      // Neither the caller's chunk nor a big buffer is kept for an idle connection.
      this.start = this.end = 0;
      if (borrowed || this.acc.length > 64 * 1024) this.acc = EMPTY;
    } else if (borrowed) {
      const own = Buffer.allocUnsafe(Math.max(live, this.need, 4096));
      this.acc.copy(own, 0, this.start, this.end);
      this.acc = own;
      this.start = 0;
      this.end = live;
    }
    return out;
  }

  /** Copies a chunk in after what is buffered, moving that down or into twice the space when there is no room. */
  private take(chunk: Buffer): void {
    if (!chunk.length) return;
    if (this.end + chunk.length > this.acc.length) {
      const live = this.end - this.start;
      const want = live + chunk.length;
      if (want <= this.acc.length / 2) this.acc.copy(this.acc, 0, this.start, this.end);
      else {
        const next = Buffer.allocUnsafe(Math.max(want, this.need, 2 * this.acc.length, 4096));
        this.acc.copy(next, 0, this.start, this.end);
        this.acc = next;
      }
      this.start = 0;
      this.end = live;
    }
    chunk.copy(this.acc, this.end);
    this.end += chunk.length;
  }

  /** The frame at the front of `b` (all that is buffered), or null with `need` set to what it lacks. */
  private frame(b: Buffer): { fin: boolean; opcode: number; payload: Buffer } | null {
    const fin = (b[0]! & 0x80) !== 0;
    if (b[0]! & 0x70) throw new WsProtocolError('reserved bits set (no extension was agreed)', 1002);
    const opcode = b[0]! & 0x0f;
    const isMasked = (b[1]! & 0x80) !== 0;
    if (isMasked !== this.masked) throw new WsProtocolError(this.masked ? 'a client frame must be masked' : 'a server frame must not be masked', 1002);
    let len = b[1]! & 0x7f;
    let off = 2;
    if (len === 126) {
      off = 4;
      if (b.length < off) return this.lacks(off);
      len = b.readUInt16BE(2);
    } else if (len === 127) {
      off = 10;
      if (b.length < off) return this.lacks(off);
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(this.maxMessageBytes)) throw new WsProtocolError('message too big', 1009);
      len = Number(big);
    }
    if (opcode >= 8 && (len > 125 || !fin)) throw new WsProtocolError('a control frame must be whole and at most 125 bytes', 1002);
    // A data frame's length counts with the fragments before it, before its bytes are waited for.
    if ((opcode >= 8 ? len : this.fragmentBytes + len) > this.maxMessageBytes) throw new WsProtocolError('message too big', 1009);
    const keyOff = off;
    if (isMasked) off += 4;
    if (b.length < off + len) return this.lacks(off + len);
    const payload = Buffer.allocUnsafe(len);
    if (isMasked) for (let i = 0; i < len; i++) payload[i] = b[off + i]! ^ b[keyOff + (i & 3)]!;
    else b.copy(payload, 0, off, off + len);
    this.start += off + len;
    this.need = 2;
    return { fin, opcode, payload };
  }

  private lacks(bytes: number): null {
    this.need = bytes;
    return null;
  }

  private message(f: { fin: boolean; opcode: number; payload: Buffer }): WsMessage | null {
    if (f.opcode >= 8) {
      if (f.opcode > 10) throw new WsProtocolError(`unknown opcode ${f.opcode}`, 1002);
      return { opcode: f.opcode, payload: f.payload };
    }
    if (f.opcode !== WS_OPCODE.continuation) {
      if (f.opcode > 2) throw new WsProtocolError(`unknown opcode ${f.opcode}`, 1002);
      if (this.fragmentOpcode >= 0) throw new WsProtocolError('a new message began inside a fragmented one', 1002);
      if (f.fin) return { opcode: f.opcode, payload: f.payload };
      this.fragmentOpcode = f.opcode;
    } else if (this.fragmentOpcode < 0) throw new WsProtocolError('a continuation frame with no message to continue', 1002);
    // Counted whether empty or not: an empty fragment costs the sender 6 bytes and would cost
    // this side a Buffer each, kept until the message ends.
    if (++this.fragmentCount > this.maxFragments) throw new WsProtocolError(`a message in more than ${this.maxFragments} frames`, 1009);
    this.fragmentBytes += f.payload.length;
    if (f.payload.length) this.fragments.push(f.payload);
    if (!f.fin) return null;
    const m = { opcode: this.fragmentOpcode, payload: Buffer.concat(this.fragments, this.fragmentBytes) };
    this.fragments = [];
    this.fragmentCount = 0;
    this.fragmentBytes = 0;
    this.fragmentOpcode = -1;
    return m;
  }
}
