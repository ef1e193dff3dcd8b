import type { EdgeApi } from './edge-api.js';

/**
 * How each EdgeApi call travels over HTTP (POST /edge/v1/<method>, one per call):
 * - `unary`: a JSON array of the arguments in, `{"r": result}` out;
 * - `files`: as unary, but the last argument (a create's files) travels as raw bytes after the
 *   JSON (file-frames.ts);
 * - `body-in`: the last argument is a byte stream, sent as the request body (the others in the
 *   `x-edge-args` header, base64url JSON), `{"r": null}` out;
 * - `body-out`: arguments as for unary, the result's bytes as the response body;
 * - `command`: arguments as for unary, the command's id in `x-command-id` and its events as
 *   NDJSON in the body;
 * - `events`: the edge's events as NDJSON, for as long as the caller reads.
 * Errors before a body starts are the API's error bodies with their status; a stream cut in
 * the middle is a broken connection. The compiler holds this table to the interface.
 */
export const EDGE_CALLS = {
  info: 'unary',
  load: 'unary',
  admit: 'unary',
  create: 'files',
  claim: 'files',
  adopt: 'unary',
  destroy: 'unary',
  sandboxes: 'unary',
  setExpiry: 'unary',
  pause: 'unary',
  resume: 'unary',
  setNetwork: 'unary',
  portAddress: 'unary',
  commit: 'unary',
  removeLeftovers: 'unary',
  exec: 'command',
  run: 'unary',
  start: 'unary',
  result: 'unary',
  follow: 'command',
  hasCommand: 'unary',
  signal: 'unary',
  stdin: 'unary',
  createSession: 'unary',
  deleteSession: 'unary',
  fnCall: 'unary',
  readFile: 'body-out',
  writeFile: 'body-in',
  statPath: 'unary',
  listDir: 'unary',
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
} as const satisfies Record<keyof EdgeApi, 'unary' | 'files' | 'body-in' | 'body-out' | 'command' | 'events'>;

export type EdgeCallName = keyof typeof EDGE_CALLS;

/** Where the calls are served. */
export const EDGE_PATH = '/edge/v1/';

/** For `body-in` calls: where the body goes among the arguments (writeFile's mode comes after it). */
export const BODY_ARG: Partial<Record<EdgeCallName, number>> = { writeFile: 2, putArchive: 2 };

/** The largest JSON a call may send (a create's files, a command's stdin), in bytes. */
export const MAX_CALL_BYTES = 512 * 2 ** 20;

/** JSON with bytes: a Buffer travels as `{"$b": base64}` (arguments and results alike). */
export function encodeValue(v: unknown): string {
  return JSON.stringify(v, function (this: Record<string, unknown>, key, value: unknown) {
    const raw = this[key];
    if (Buffer.isBuffer(raw) || raw instanceof Uint8Array) return { $b: Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('base64') };
    return value;
  });
}

export function decodeValue(text: string): unknown {
  return JSON.parse(text, (_key, value: unknown) => {
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      const o = value as Record<string, unknown>;
      const keys = Object.keys(o);
      if (keys.length === 1 && keys[0] === '$b' && typeof o.$b === 'string') return Buffer.from(o.$b, 'base64');
    }
    return value;
  });
}
