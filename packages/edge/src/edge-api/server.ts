import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { timingSafeEqual } from 'node:crypto';
import { chmod, rm } from 'node:fs/promises';
import { WarrenError, serializeError } from '@warren/api';
import type { CommandStream, EdgeApi } from './edge-api.js';
import { ContentCache, decodeFileCall } from './file-frames.js';
import { END_FRAME, FRAME, FrameReader, MAX_DATA_FRAME, textFrame, type FrameType } from './frames.js';
import { write, writeData } from './frame-socket.js';
import { Hangup } from '../util/hangup.js';
import { Inbox } from '../util/inbox.js';
import { splice } from '../util/splice.js';
import { BODY_ARG, CLOCK_HEADER, EDGE_CALLS, EDGE_PATH, EDGE_PROTOCOL, MAX_CALL_BYTES, decodeValue, encodeValue, type EdgeCallName } from './wire.js';

export interface EdgeApiServerOptions {
  /** What every connection must carry as `authorization: Bearer <token>`. */
  token: string;
  logger?: { warn(msg: string, meta?: unknown): void };
  /** The edge's wall clock, the one its lifecycle runs on (default Date.now): each answer carries it, for the caller to measure the offset from its own. */
  now?: () => number;
  /**
   * Serve TLS with this key and certificate (PEM; an edge makes one at each start,
   * selfSignedCertificate): the control plane pins the certificate's fingerprint, which the edge
   * gave in its join.
   */
  tls?: { key: string; cert: string };
}

/** What a body sent to the edge may hold queued before its connection is paused, in bytes. */
const BODY_HIGH = MAX_DATA_FRAME;

/** One connection of a control plane: its calls one after another. */
class Connection {
  private readonly reader = new FrameReader(MAX_CALL_BYTES + 64);
  /** The body of the call in progress (its `data` frames), until its `end`. */
  private body: Inbox<Buffer> | null = null;
  private busy = false;
  private closed = false;
  /** The stream of the call in progress stops when the connection goes. */
  private readonly hangup: Hangup;
  private readonly onData: (c: Buffer) => void;
  private readonly onEnd = (): void => void this.socket.end();

  constructor(
    private readonly socket: Socket,
    private readonly api: EdgeApi,
    private readonly content: ContentCache,
    private readonly o: EdgeApiServerOptions,
    head: Buffer,
  ) {
    this.hangup = new Hangup(socket);
    socket.setNoDelay(true);
    const onData = (c: Buffer): void => {
      try {
        this.reader.push(c, (t, p) => this.frame(t, p));
      } catch (e) {
        this.drop(e);
      }
    };
    this.onData = onData;
    socket.on('data', onData);
    socket.on('error', () => undefined);
    // The control plane hung up (its end of the connection): this end closes too, not half-open.
    socket.once('end', this.onEnd);
    socket.once('close', () => {
      this.closed = true;
      this.body?.end(new WarrenError('unavailable', 'the control plane’s connection broke'));
    });
    // What came with the upgrade request, after its head.
    if (head.length) onData(head);
  }

  private drop(why: unknown): void {
    if (!this.closed) this.o.logger?.warn('edge protocol connection dropped', { error: String(why) });
    this.socket.destroy();
  }

  private frame(type: FrameType, payload: Buffer): void {
    if (type === FRAME.data) {
      // Data after the call answered is dropped (discard): the caller stops sending when it sees the answer.
      if (!this.body) throw new Error('data outside a body');
      this.body.push(payload);
    } else if (type === FRAME.end) {
      if (!this.body) throw new Error('an end outside a body');
      this.body.end();
      this.body = null;
    } else if (type === FRAME.call) {
      if (this.busy || this.body) throw new Error('a call while another is in progress');
      this.busy = true;
      this.call({ payload }).then(
        () => void (this.busy = false),
        (e: unknown) => this.drop(e),
      );
    } else throw new Error(`a frame of type ${type} sent to the edge`);
  }

  private async call(frame: { payload: Buffer | null }): Promise<void> {
    let name = '';
    try {
      const msg = decodeValue(frame.payload!.toString('utf8')) as { c?: unknown; a?: unknown };
      // Its bytes are not held while the call runs (a stdin write may wait long).
      frame.payload = null;
      name = typeof msg?.c === 'string' ? msg.c : '';
      if (!Object.hasOwn(EDGE_CALLS, name)) throw new WarrenError('not_found', `no edge call ${JSON.stringify(msg?.c ?? null)}`);
      const call = name as EdgeCallName;
      const kind = EDGE_CALLS[call];
      if (kind === 'files' || kind === 'body-in') this.body = this.newBody();
      const args = kind === 'files' ? await decodeFileCall(this.body!, this.content, MAX_CALL_BYTES) : (msg.a ?? []);
      if (!Array.isArray(args)) throw new WarrenError('invalid_argument', 'an edge call takes an array of arguments');
      const fn = this.api[call] as (...a: unknown[]) => Promise<unknown>;
      if (kind === 'unary' || kind === 'files') {
        const r = await fn.apply(this.api, args);
        await this.answer(textFrame(FRAME.result, `{"r":${r === undefined ? 'null' : encodeValue(r)},"t":${(this.o.now ?? Date.now)()}}`));
      } else if (kind === 'body-in') {
        args.splice(BODY_ARG[call] ?? args.length, 0, this.body);
        await fn.apply(this.api, args);
        await this.answer(textFrame(FRAME.result, '{"r":null}'));
      } else if (kind === 'body-out') {
        const out = (await fn.apply(this.api, args)) as AsyncIterable<Uint8Array>;
        await this.answer(textFrame(FRAME.result, '{"r":null}'));
        await this.stream(out, (c) => writeData(this.socket, c));
      } else if (kind === 'command') {
        const s = (await fn.apply(this.api, args)) as CommandStream;
        // The caller has the command's id at once, whenever its first output comes.
        await this.answer(textFrame(FRAME.result, JSON.stringify({ r: { i: s.commandId, p: s.pid ?? 0 } })));
        await this.stream(s.events, (v) => write(this.socket, textFrame(FRAME.item, JSON.stringify(v))));
      } else if (kind === 'tunnel') {
        const peer = (await fn.apply(this.api, args)) as Duplex;
        if (this.closed) return void peer.destroy();
        await this.answer(textFrame(FRAME.result, '{"r":null}'));
        this.tunnel(peer);
      } else {
        await this.answer(textFrame(FRAME.result, '{"r":null}'));
        const after = typeof args[0] === 'number' ? args[0] : undefined;
        await this.stream(this.api.events(after), (v) => write(this.socket, textFrame(FRAME.item, JSON.stringify(v))));
      }
    } catch (e) {
      if (this.closed) return;
      if (!(e instanceof WarrenError)) this.o.logger?.warn('edge call failed', { call: name, error: String(e) });
      const { status, body } = serializeError(e);
      await this.answer(textFrame(FRAME.error, JSON.stringify({ s: status, b: body })));
    }
  }

  /**
   * The connection becomes raw bytes both ways between the control plane and `peer` (what a
   * `tunnel` call opened), with TCP's back-pressure, until either end closes (splice); it
   * serves no other call.
   */
  private tunnel(peer: Duplex): void {
    this.socket.pause();
    this.socket.off('data', this.onData);
    this.socket.off('end', this.onEnd);
    const early = this.reader.detach();
    if (early.length) peer.write(early);
    splice(this.socket, peer);
  }

  /** A body's `data` frames as chunks; the connection pauses while too much of it is queued. */
  private newBody(): Inbox<Buffer> {
    return new Inbox<Buffer>({
      size: (c) => c.length,
      high: BODY_HIGH,
      pause: () => this.socket.pause(),
      resume: () => this.socket.resume(),
      // A handler that stops reading early answers soon; what still comes is dropped (frame()).
      stopped: () => this.socket.resume(),
    });
  }

  /** Writes a call's answer (a body the handler left unread is drained and dropped after it). */
  private async answer(frame: Buffer): Promise<void> {
    // The rest of a body is not wanted: dropped as it comes, until its end keeps the connection in step.
    this.body?.discard();
    await write(this.socket, frame);
  }

  /** Writes a stream's values until it ends (then `end`, or `error` if it failed) or the connection goes (then stops it). */
  private async stream<T>(items: AsyncIterable<T>, put: (v: T) => Promise<boolean> | true): Promise<void> {
    const it = items[Symbol.asyncIterator]();
    try {
      for (;;) {
        const r = await this.hangup.race(it.next());
        if (r === 'gone' || r.done) break;
        const ok = put(r.value);
        if (ok !== true && !(await ok)) break;
      }
      if (!this.closed) this.socket.write(END_FRAME);
    } catch (e) {
      if (this.closed) return;
      const { status, body } = serializeError(e);
      this.socket.write(textFrame(FRAME.error, JSON.stringify({ s: status, b: body })));
    } finally {
      await it.return?.();
    }
  }
}

function refuse(res: ServerResponse | Duplex, e: WarrenError, extra: Record<string, string> = {}): void {
  const { status, body } = serializeError(e);
  const text = JSON.stringify(body);
  if ('writeHead' in res) {
    res.writeHead(status, { 'content-type': 'application/json', ...extra });
    res.end(text);
    return;
  }
  const head = [
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Bad Request'}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(text)}`,
    'connection: close',
  ];
  res.end(`${head.join('\r\n')}\r\n\r\n${text}`);
}

/**
 * Serves an EdgeApi (see wire.ts and docs/edge-api.md): a control plane opens a connection with
 * an HTTP/1.1 upgrade to the edge protocol (`GET /edge/v1`, `upgrade: warren-edge/1`, its bearer
 * token), then sends calls one after another as frames (frames.ts). The caller listens (a Unix
 * socket or a port) and closes the server.
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
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    if (!authorized(req.headers.authorization)) return refuse(res, new WarrenError('unauthenticated', 'this edge answers only its control plane'));
    refuse(res, new WarrenError('invalid_argument', `the edge speaks ${EDGE_PROTOCOL} only: GET ${EDGE_PATH} with upgrade: ${EDGE_PROTOCOL}`), {
      upgrade: EDGE_PROTOCOL,
    });
  };
  const server: Server = o.tls
    ? createHttpsServer({ keepAlive: false, key: o.tls.key, cert: o.tls.cert }, handler)
    : createServer({ keepAlive: false }, handler);
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => undefined);
    if (!authorized(req.headers.authorization)) return refuse(socket, new WarrenError('unauthenticated', 'this edge answers only its control plane'));
    if (req.url !== EDGE_PATH || req.headers.upgrade !== EDGE_PROTOCOL)
      return refuse(socket, new WarrenError('invalid_argument', `the edge speaks ${EDGE_PROTOCOL} only: GET ${EDGE_PATH} with upgrade: ${EDGE_PROTOCOL}`));
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: ${EDGE_PROTOCOL}\r\n${CLOCK_HEADER}: ${(o.now ?? Date.now)()}\r\n\r\n`);
    new Connection(socket as Socket, api, content, o, head);
  });
  return server;
}

/**
 * Serves an EdgeApi on a Unix socket only its owner may open (one left by a process before is
 * replaced), or on a TCP `host` and `port` (0: any; `port` answers the one it got). `close`
 * drops every connection, stops the server and removes the socket.
 */
export async function listenEdgeApi(
  api: EdgeApi,
  at: string | { host: string; port: number },
  o: EdgeApiServerOptions,
): Promise<{ port: number; close(): Promise<void> }> {
  const socketPath = typeof at === 'string' ? at : null;
  if (socketPath) await rm(socketPath, { force: true });
  const server = serveEdgeApi(api, o);
  const open = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    open.add(s);
    s.once('close', () => open.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (socketPath) server.listen(socketPath, () => resolve());
    else if (typeof at !== 'string') server.listen(at.port, at.host, () => resolve());
  });
  if (socketPath) await chmod(socketPath, 0o600);
  const addr = server.address();
  return {
    port: addr && typeof addr === 'object' ? addr.port : 0,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of open) s.destroy();
      });
      if (socketPath) await rm(socketPath, { force: true });
    },
  };
}
