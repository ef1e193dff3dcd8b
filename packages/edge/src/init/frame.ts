/** Frame types of the warren-init protocol (docs/init-protocol.md). */
export const REQ = {
  hello: 'H',
  exec: 'E',
  newSession: 'N',
  sessionRun: 'Q',
  endSession: 'D',
  read: 'R',
  write: 'W',
  stat: 'S',
  list: 'L',
  remove: 'X',
  mkdir: 'M',
  move: 'V',
  attrs: 'A',
  fn: 'F',
  data: 'i',
  eof: 'j',
  signal: 'k',
  resize: 'w',
} as const;

export const REPLY = {
  started: 's',
  stdout: 'o',
  stderr: 'r',
  done: 'x',
  failed: 'f',
  hello: 'k',
  session: 'n',
  entry: 'e',
} as const;

export const MAX_FRAME_BYTES = 16 * 1024 * 1024 + 1;

/** A field list: single-character keys, possibly repeated, with string or byte values. */
export type Fields = Array<[string, string | Buffer]>;

export interface Frame {
  type: string;
  payload: Buffer;
}

/** Encodes one frame: u32 LE length (type + payload), type byte, payload. */
export function encodeFrame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.allocUnsafe(5);
  head.writeUInt32LE(payload.length + 1, 0);
  head[4] = type.charCodeAt(0);
  return Buffer.concat([head, payload]);
}

/** Encodes a field list payload. */
export function encodeFields(fields: Fields): Buffer {
  const parts: Buffer[] = [];
  for (const [k, v] of fields) {
    const val = typeof v === 'string' ? Buffer.from(v) : v;
    const head = Buffer.allocUnsafe(5);
    head[0] = k.charCodeAt(0);
    head.writeUInt32LE(val.length, 1);
    parts.push(head, val);
  }
  return Buffer.concat(parts);
}

/** Decodes a field list payload into a map of key → values (in order). */
export function decodeFields(buf: Buffer): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let i = 0;
  while (i < buf.length) {
    if (i + 5 > buf.length) throw new Error('truncated field header');
    const key = String.fromCharCode(buf[i] ?? 0);
    const len = buf.readUInt32LE(i + 1);
    if (i + 5 + len > buf.length) throw new Error('truncated field value');
    const val = buf.subarray(i + 5, i + 5 + len).toString();
    const list = out.get(key);
    if (list) list.push(val);
    else out.set(key, [val]);
    i += 5 + len;
  }
  return out;
}

/** Incremental frame decoder for a byte stream. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private size = 0;

  /** Feeds bytes; returns every complete frame. Throws on a frame over the size limit. */
  push(data: Buffer): Frame[] {
    this.chunks.push(data);
    this.size += data.length;
    const frames: Frame[] = [];
    if (this.size < 5) return frames;
    let buf = this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks);
    let off = 0;
    while (buf.length - off >= 5) {
      const len = buf.readUInt32LE(off);
      if (len < 1 || len > MAX_FRAME_BYTES) throw new Error(`bad frame length ${len}`);
      if (buf.length - off < 4 + len) break;
      frames.push({ type: String.fromCharCode(buf[off + 4] ?? 0), payload: buf.subarray(off + 5, off + 4 + len) });
      off += 4 + len;
    }
    buf = buf.subarray(off);
    this.chunks = buf.length ? [buf] : [];
    this.size = buf.length;
    return frames;
  }
}
