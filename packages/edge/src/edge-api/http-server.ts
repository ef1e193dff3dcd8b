import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { chmod, rm } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { WarrenError, serializeError } from '@warren/api';
import type { CommandStream, EdgeApi } from './edge-api.js';
import { ContentCache, decodeFileCall } from './file-frames.js';
import { BODY_ARG, EDGE_CALLS, EDGE_PATH, MAX_CALL_BYTES, collectBody, decodeValue, encodeValue, type EdgeCallName } from './wire.js';

export interface EdgeApiServerOptions {
  /** What every call must carry as `authorization: Bearer <token>`. */
  token: string;
  logger?: { warn(msg: string, meta?: unknown): void };
}

/** A call's JSON arguments. */
async function readJson(req: IncomingMessage): Promise<unknown> {
  const b = await collectBody(req, MAX_CALL_BYTES, () => new WarrenError('payload_too_large', `an edge call is limited to ${MAX_CALL_BYTES} bytes`));
  try {
    return b.length === 0 ? [] : decodeValue(b.toString('utf8'));
  } catch {
    throw new WarrenError('invalid_argument', 'an edge call’s arguments are not JSON');
  }
}

function sendError(res: ServerResponse, e: unknown): void {
  const { status, body } = serializeError(e);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Writes NDJSON lines from `items` until they end or the caller goes away (then stops reading them). */
async function streamLines(res: ServerResponse, items: AsyncIterable<unknown>): Promise<void> {
  const it = items[Symbol.asyncIterator]();
  const gone = new Promise<'gone'>((resolve) => res.once('close', () => resolve('gone')));
  try {
    for (;;) {
      const r = await Promise.race([it.next(), gone]);
      if (r === 'gone' || r.done) break;
      if (!res.write(JSON.stringify(r.value) + '\n')) await Promise.race([new Promise((ok) => res.once('drain', ok)), gone]);
    }
  } finally {
    await it.return?.();
    res.end();
  }
}

/**
 * Serves an EdgeApi over HTTP/1.1 (keep-alive, streamed bodies; see wire.ts for the calls): what
 * a control plane in another process or on another machine reaches an edge through. The caller
 * listens (a Unix socket or a port) and closes the server.
 * @example
 * const server = serveEdgeApi(localEdgeApi(edge), { token });
 * server.listen('/var/lib/warren/run/edge.sock');
 */
export function serveEdgeApi(api: EdgeApi, o: EdgeApiServerOptions): Server {
  const want = Buffer.from(`Bearer ${o.token}`);
  const authorized = (h: string | undefined): boolean => {
    const got = Buffer.from(h ?? '');
    return got.length === want.length && timingSafeEqual(got, want);
  };
  // A batch's creates bring the same files: one copy of each while they are in use.
  const content = new ContentCache();
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!authorized(req.headers.authorization)) throw new WarrenError('unauthenticated', 'this edge answers only its control plane');
    const url = req.url ?? '';
    const name = url.startsWith(EDGE_PATH) ? url.slice(EDGE_PATH.length) : '';
    if (req.method !== 'POST' || !Object.hasOwn(EDGE_CALLS, name)) throw new WarrenError('not_found', `no edge call ${req.method ?? ''} ${url}`);
    const call = name as EdgeCallName;
    const kind = EDGE_CALLS[call];
    const fn = api[call] as (...a: unknown[]) => Promise<unknown>;
    if (kind === 'body-in') {
      const head = req.headers['x-edge-args'];
      const args = typeof head === 'string' ? decodeValue(Buffer.from(head, 'base64url').toString('utf8')) : [];
      if (!Array.isArray(args)) throw new WarrenError('invalid_argument', 'x-edge-args must be a JSON array');
      args.splice(BODY_ARG[call] ?? args.length, 0, req);
      await fn.apply(api, args);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"r":null}');
      return;
    }
    const args = kind === 'files' ? await decodeFileCall(req, content, MAX_CALL_BYTES) : await readJson(req);
    if (!Array.isArray(args)) throw new WarrenError('invalid_argument', 'an edge call takes a JSON array of arguments');
    if (kind === 'unary' || kind === 'files') {
      const r = await fn.apply(api, args);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"r":${r === undefined ? 'null' : encodeValue(r)}}`);
    } else if (kind === 'body-out') {
      const body = (await fn.apply(api, args)) as AsyncIterable<Uint8Array>;
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      await pipeline(Readable.from(body), res);
    } else if (kind === 'command') {
      const s = (await fn.apply(api, args)) as CommandStream;
      res.writeHead(200, { 'content-type': 'application/x-ndjson', 'x-command-id': s.commandId });
      // The caller has the command's id at once, whenever its first output comes.
      res.flushHeaders();
      await streamLines(res, s.events);
    } else {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.flushHeaders();
      await streamLines(res, api.events(typeof args[0] === 'number' ? args[0] : undefined));
    }
  };
  const server = createServer({ keepAlive: true, keepAliveTimeout: 60_000, requestTimeout: 0 }, (req, res) => {
    handle(req, res).catch((e: unknown) => {
      if (!(e instanceof WarrenError)) o.logger?.warn('edge call failed', { url: req.url, error: String(e) });
      sendError(res, e);
    });
  });
  return server;
}

/**
 * Serves an EdgeApi on a Unix socket only its owner may open (one left by a process before is
 * replaced). `close` drops every connection, stops the server and removes the socket.
 */
export async function listenEdgeApi(api: EdgeApi, socketPath: string, o: EdgeApiServerOptions): Promise<{ close(): Promise<void> }> {
  await rm(socketPath, { force: true });
  const server = serveEdgeApi(api, o);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  await chmod(socketPath, 0o600);
  return {
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await rm(socketPath, { force: true });
    },
  };
}
