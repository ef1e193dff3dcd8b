import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, type ErrorCode } from '@warren/api';
import { readBody } from '../../http/io.js';

/**
 * The Connect protocol (JSON codec) as E2B's SDKs speak it to a sandbox's agent: unary calls are
 * a JSON body answered with JSON; a server stream's request is one envelope and its answer a run
 * of envelopes (a flag byte, a 4-byte big-endian length, JSON), ended by an end-of-stream
 * envelope (flag 2) that carries the error, if any.
 */

/** The largest request a call takes (stdin in base64: 16 MiB of it, as Warren's exec takes). */
const MAX_REQUEST = 24 * 1024 * 1024;
const END_STREAM = 0x02;

/** Warren's error codes in Connect's words. */
const CODES: Record<ErrorCode, string> = {
  invalid_argument: 'invalid_argument',
  unauthenticated: 'unauthenticated',
  permission_denied: 'permission_denied',
  not_found: 'not_found',
  conflict: 'failed_precondition',
  resource_exhausted: 'resource_exhausted',
  payload_too_large: 'resource_exhausted',
  deadline_exceeded: 'deadline_exceeded',
  unavailable: 'unavailable',
  internal: 'internal',
} as Record<ErrorCode, string>;

/** Connect's HTTP status for each of its codes (unary errors). */
const STATUS: Record<string, number> = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  already_exists: 409,
  failed_precondition: 400,
  resource_exhausted: 429,
  deadline_exceeded: 504,
  unavailable: 503,
  unimplemented: 501,
  internal: 500,
};

/** A Connect error of its own code (already_exists, unimplemented: codes Warren's errors lack). */
export class ConnectError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A thrown value in Connect's words (anything not Warren's: internal, with no detail). */
export function connectError(e: unknown): { code: string; message: string } {
  if (e instanceof ConnectError) return { code: e.code, message: e.message };
  if (e instanceof WarrenError) return { code: CODES[e.code] ?? 'internal', message: e.message };
  return { code: 'internal', message: 'internal error' };
}

/** Whether the request is a stream's (its content type says so). */
export const isStreamRequest = (req: IncomingMessage): boolean => String(req.headers['content-type'] ?? '').startsWith('application/connect+json');

/** A call's request message: the JSON body (unary) or the one envelope (stream). */
export async function readMessage(req: IncomingMessage): Promise<Record<string, unknown>> {
  const raw = await readBody(req, MAX_REQUEST);
  let json = raw;
  if (isStreamRequest(req)) {
    if (raw.length < 5 || raw.readUInt32BE(1) !== raw.length - 5) throw new ConnectError('invalid_argument', 'a stream request is one whole envelope');
    if (raw[0] !== 0) throw new ConnectError('invalid_argument', 'compressed envelopes are not taken');
    json = raw.subarray(5);
  }
  try {
    const v = json.length ? (JSON.parse(json.toString('utf8')) as unknown) : {};
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch {
    throw new ConnectError('invalid_argument', 'the request is not a JSON message');
  }
}

/** A unary call's answer. */
export function sendUnary(res: ServerResponse, message: unknown): void {
  const body = JSON.stringify(message);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** A unary call's error, with the HTTP status Connect gives its code. */
export function sendUnaryError(res: ServerResponse, e: unknown): void {
  const err = connectError(e);
  const body = JSON.stringify(err);
  res.writeHead(STATUS[err.code] ?? 500, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function envelope(flags: number, json: string): Buffer {
  const body = Buffer.from(json);
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

/**
 * A server stream's answer: messages as they come, then its end (with an error or not). A send
 * resolves once the client has taken what is buffered (the socket drained), so a producer that
 * awaits it runs at the client's pace and a client that never reads holds one message.
 */
export class ConnectStream {
  private ended = false;

  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'application/connect+json', 'cache-control': 'no-store' });
  }

  get closed(): boolean {
    return this.ended || this.res.destroyed;
  }

  async send(message: unknown): Promise<void> {
    if (this.closed) return;
    if (!this.res.write(envelope(0, JSON.stringify(message)))) await this.drained();
  }

  /** A keepalive: skipped while the client has not taken what it was sent (it would only pile up). */
  ping(message: unknown): void {
    if (!this.closed && !this.res.writableNeedDrain) this.res.write(envelope(0, JSON.stringify(message)));
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        this.res.off('drain', done).off('close', done);
        resolve();
      };
      this.res.on('drain', done).on('close', done);
    });
  }

  end(error?: unknown): void {
    if (this.closed) return;
    this.ended = true;
    this.res.end(envelope(END_STREAM, JSON.stringify(error === undefined ? {} : { error: connectError(error) })));
  }
}

/** The HTTP status a unary call's error answers with (what its audit entry records). */
export function connectStatus(e: unknown): number {
  return STATUS[connectError(e).code] ?? 500;
}
