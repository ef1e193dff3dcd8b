import { createHash, randomBytes } from 'node:crypto';

/**
 * WebSocket framing (RFC 6455) as pure functions, for the terminal (`GET /v1/sandboxes/{id}/pty`):
 * the server's side and the clients' (the SDK, `warren shell`). No extensions, no subprotocols.
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

/**
 * Turns bytes from one side of a WebSocket into messages. `masked`: whether that side's frames
 * must be masked (a client's must, a server's must not). A message (its fragments together)
 * longer than `maxMessageBytes` is an error, as is anything RFC 6455 forbids that matters here.
 */
export class WsDecoder {
  private buf: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentBytes = 0;
  private fragmentOpcode = -1;

  constructor(
    private readonly masked: boolean,
    private readonly maxMessageBytes = 1024 * 1024,
  ) {}

  /** Messages whole in what has come so far; throws WsProtocolError on a frame it cannot take. */
  push(chunk: Buffer): WsMessage[] {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    const out: WsMessage[] = [];
    for (;;) {
      const f = this.frame();
      if (!f) break;
      const m = this.message(f);
      if (m) out.push(m);
    }
    return out;
  }

  private frame(): { fin: boolean; opcode: number; payload: Buffer } | null {
    const b = this.buf;
    if (b.length < 2) return null;
    const fin = (b[0]! & 0x80) !== 0;
    if (b[0]! & 0x70) throw new WsProtocolError('reserved bits set (no extension was agreed)', 1002);
    const opcode = b[0]! & 0x0f;
    const isMasked = (b[1]! & 0x80) !== 0;
    if (isMasked !== this.masked) throw new WsProtocolError(this.masked ? 'a client frame must be masked' : 'a server frame must not be masked', 1002);
    let len = b[1]! & 0x7f;
    let off = 2;
    if (len === 126) {
      if (b.length < 4) return null;
      len = b.readUInt16BE(2);
      off = 4;
    } else if (len === 127) {
      if (b.length < 10) return null;
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(this.maxMessageBytes)) throw new WsProtocolError('message too big', 1009);
      len = Number(big);
      off = 10;
    }
    if (opcode >= 8 && (len > 125 || !fin)) throw new WsProtocolError('a control frame must be whole and at most 125 bytes', 1002);
    if (len > this.maxMessageBytes) throw new WsProtocolError('message too big', 1009);
    const keyOff = off;
    if (isMasked) off += 4;
    if (b.length < off + len) return null;
    const payload = Buffer.from(b.subarray(off, off + len));
    if (isMasked) for (let i = 0; i < len; i++) payload[i]! ^= b[keyOff + (i & 3)]!;
    this.buf = b.subarray(off + len);
    return { fin, opcode, payload };
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
    this.fragmentBytes += f.payload.length;
    if (this.fragmentBytes > this.maxMessageBytes) throw new WsProtocolError('message too big', 1009);
    this.fragments.push(f.payload);
    if (!f.fin) return null;
    const m = { opcode: this.fragmentOpcode, payload: Buffer.concat(this.fragments) };
    this.fragments = [];
    this.fragmentBytes = 0;
    this.fragmentOpcode = -1;
    return m;
  }
}
