import type { IncomingMessage } from 'node:http';
import { WarrenError } from '@warren/api';
import type { EdgeApi } from './edge-api.js';

/**
 * How each EdgeApi call travels in the edge protocol (frames.ts; one call at a time on a
 * connection, `{"c": name, "a": args}` in a `call` frame):
 * - `unary`: `{"r": result}` back in a `result` frame;
 * - `files`: the call frame names the call only; the arguments and a create's files follow as
 *   raw bytes in `data` frames (file-frames.ts) to an `end`; then as unary;
 * - `body-in`: the last argument is a byte stream, sent as `data` frames after the call to an
 *   `end` (the others in the call frame); `{"r": null}` back;
 * - `body-out`: a `result` frame, then the bytes as `data` frames to an `end`;
 * - `command`: a `result` frame with the command's id, then its events as `item` frames to an `end`;
 * - `events`: a `result` frame, then the edge's events as `item` frames for as long as the caller reads;
 * - `tunnel`: a `result` frame once the edge has connected; then the connection carries raw
 *   bytes both ways, no frames, until either end closes it (the caller sends nothing after the
 *   call until that answer, and the connection serves no other call).
 * An `error` frame ends any call, before its answer or in the middle of its stream; a reader that
 * stops early closes the connection. The compiler holds this table to the interface.
 */
export const EDGE_CALLS = {
  info: 'unary',
  load: 'unary',
  admit: 'unary',
  create: 'files',
  createMany: 'files',
  fork: 'unary',
  readLayer: 'body-out',
  claim: 'files',
  adopt: 'unary',
  destroy: 'unary',
  sandboxes: 'unary',
  setExpiry: 'unary',
  pause: 'unary',
  resume: 'unary',
  setNetwork: 'unary',
  openPort: 'tunnel',
  commit: 'unary',
  screen: 'body-out',
  input: 'unary',
  removeLeftovers: 'unary',
  exec: 'command',
  run: 'unary',
  start: 'unary',
  result: 'unary',
  follow: 'command',
  hasCommand: 'unary',
  signal: 'unary',
  resize: 'unary',
  commands: 'unary',
  stdin: 'unary',
  createSession: 'unary',
  deleteSession: 'unary',
  fnCall: 'unary',
  fnRun: 'unary',
  fnWarm: 'unary',
  poolsSet: 'unary',
  poolTake: 'unary',
  leasesSet: 'unary',
  readFile: 'body-out',
  writeFile: 'body-in',
  statPath: 'unary',
  listDir: 'unary',
  setAttrs: 'unary',
  removePath: 'unary',
  makeDir: 'unary',
  movePath: 'unary',
  putArchive: 'body-in',
  getArchive: 'body-out',
  layersInUse: 'unary',
  forgetLayers: 'unary',
  networkMetrics: 'unary',
  sweep: 'unary',
  events: 'events',
  close: 'unary',
} as const satisfies Record<keyof EdgeApi, 'unary' | 'files' | 'body-in' | 'body-out' | 'command' | 'events' | 'tunnel'>;

export type EdgeCallName = keyof typeof EDGE_CALLS;

/** Where a connection asks for the edge protocol (an HTTP/1.1 upgrade to EDGE_PROTOCOL). */
export const EDGE_PATH = '/edge/v1';
export const EDGE_PROTOCOL = 'warren-edge/1';
/** The upgrade answer's header with the edge's wall clock (ms); each unary answer carries it too, as `t`. */
export const CLOCK_HEADER = 'x-warren-clock';

/** For `body-in` calls: where the body goes among the arguments (writeFile's mode comes after it). */
export const BODY_ARG: Partial<Record<EdgeCallName, number>> = { writeFile: 2, putArchive: 2 };

/** The largest JSON a call may send (a create's files, a command's stdin), in bytes. */
export const MAX_CALL_BYTES = 512 * 2 ** 20;

/** Whether a value holds bytes (a Buffer or another typed array) anywhere; very deep values are taken to. */
function hasBytes(v: unknown, depth = 0): boolean {
  if (v === null || typeof v !== 'object') return false;
  if (ArrayBuffer.isView(v) || depth > 16) return true;
  if (Array.isArray(v)) {
    for (const x of v) if (hasBytes(x, depth + 1)) return true;
    return false;
  }
  for (const k in v) if (hasBytes((v as Record<string, unknown>)[k], depth + 1)) return true;
  return false;
}

/**
 * JSON with bytes: a Buffer travels as `{"$b": base64}` (arguments and results alike). Most calls
 * carry none, and take plain JSON: the replacer is a call into JavaScript for every key.
 */
export function encodeValue(v: unknown): string {
  if (!hasBytes(v)) return JSON.stringify(v);
  return JSON.stringify(v, function (this: Record<string, unknown>, key, value: unknown) {
    const raw = this[key];
    if (Buffer.isBuffer(raw) || raw instanceof Uint8Array) return { $b: Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('base64') };
    return value;
  });
}

/** encodeValue's JSON back; the reviver only for a text with a `"$b"` in it (it leaves all else as it is). */
export function decodeValue(text: string): unknown {
  if (!text.includes('"$b"')) return JSON.parse(text);
  return JSON.parse(text, (_key, value: unknown) => {
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      const o = value as Record<string, unknown>;
      const keys = Object.keys(o);
      if (keys.length === 1 && keys[0] === '$b' && typeof o.$b === 'string') return Buffer.from(o.$b, 'base64');
    }
    return value;
  });
}

/**
 * The whole body of a request or an answer, at most `max` bytes (`tooBig` past it, and the
 * stream is dropped); a connection that breaks first rejects with `unavailable`. Events, not
 * async iteration: this is every call's hot path.
 */
export function collectBody(s: IncomingMessage, max: number, tooBig: () => Error): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let n = 0;
    s.on('data', (c: Buffer) => {
      n += c.length;
      if (n > max) {
        s.destroy();
        reject(tooBig());
      } else parts.push(c);
    });
    s.once('end', () => resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts)));
    s.once('error', (e) => reject(new WarrenError('unavailable', 'the connection to the edge broke', {}, { cause: e })));
    s.once('close', () => {
      if (!s.complete) reject(new WarrenError('unavailable', 'the connection to the edge broke'));
    });
  });
}
