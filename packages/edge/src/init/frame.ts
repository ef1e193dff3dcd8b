import { ByteQueue } from '../util/byte-queue.js';
import { CLIENT_FRAMES, MAX_FRAME_BYTES, REPLIES, REQUESTS, typesOf } from './protocol.js';

/**
 * Frame types of the warren-init protocol by name (docs/init-protocol.md), from its one table
 * (init/protocol.ts): the requests and the client frames that follow them.
 */
export const REQ = { ...typesOf(REQUESTS), ...typesOf(CLIENT_FRAMES) };

/** The frames the init answers with, by name. */
export const REPLY = typesOf(REPLIES);

export { MAX_FRAME_BYTES };

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

/**
 * The largest reply the host takes from an init, in bytes: output comes in pieces of at most
 * 64 KiB (native/init/init.h CHUNK) and the largest field list is an entry with its 64 extended
 * attributes of 4 KiB (XATTR_COUNT_MAX, XATTR_VALUE_MAX), under 300 KiB. Far below the protocol's
 * 16 MiB: an init that claims more is broken or hostile (a microVM's guest writes every byte of
 * it), and is not waited for.
 */
export const MAX_REPLY_BYTES = 1024 * 1024;

/**
 * Incremental frame decoder for a byte stream. Chunks are kept as they come and a frame's bytes
 * joined once it is whole (ByteQueue), so a frame fed a byte at a time costs one copy, not one per
 * byte; a frame's length is checked against the limit as soon as its header is in.
 */
export class FrameDecoder {
  private readonly held = new ByteQueue();
  /** The payload length and type of the frame being read (its header taken); -1: none. */
  private need = -1;
  private type = '';

  /** `limit`: the largest payload taken (the host reading replies: MAX_REPLY_BYTES). */
  constructor(private readonly limit = MAX_REPLY_BYTES) {}

  /** Whether no byte of a frame not yet whole is held. */
  get empty(): boolean {
    return this.need < 0 && this.held.length === 0;
  }

  /** Feeds bytes; returns every complete frame. Throws on a frame over the limit. */
  push(data: Buffer): Frame[] {
    this.held.push(data);
    const frames: Frame[] = [];
    for (;;) {
      if (this.need < 0) {
        if (this.held.length < 5) break;
        const q = this.held;
        const len = (q.at(0) | (q.at(1) << 8) | (q.at(2) << 16) | (q.at(3) << 24)) >>> 0;
        const type = String.fromCharCode(q.at(4));
        q.skip(5);
        if (len < 1 || len > MAX_FRAME_BYTES) throw new Error(`bad frame length ${len}`);
        if (len - 1 > this.limit) throw new Error(`an init frame of type '${type}' with ${len - 1} bytes is over the ${this.limit} allowed`);
        this.need = len - 1;
        this.type = type;
      }
      if (this.held.length < this.need) break;
      frames.push({ type: this.type, payload: this.held.take(this.need) });
      this.need = -1;
    }
    return frames;
  }
}
