import { request, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Duplex } from 'node:stream';
import { WarrenError, parseError } from '@warren/api';
import type { ExecEvent } from '@warren/api';
import type { CommandStream, EdgeApi, EdgeFile } from './edge-api.js';
import { CLOCKED, ClockOffset, shiftEvent } from './clock.js';
import { encodeFileCall } from './file-frames.js';
import { END_FRAME, FRAME, FrameReader, MAX_DATA_FRAME, frameHeader, textFrame, type FrameType } from './frames.js';
import { writeData } from './frame-socket.js';
import { connectPinned } from './tls-pin.js';
import type { EdgeEvent } from '../lifecycle/events.js';
import { Inbox } from '../util/inbox.js';
import {
  BODY_ARG,
  CLOCK_HEADER,
  EDGE_CALLS,
  EDGE_PATH,
  EDGE_PROTOCOL,
  MAX_CALL_BYTES,
  collectBody,
  decodeValue,
  encodeValue,
  type EdgeCallName,
} from './wire.js';

export interface RemoteEdgeOptions {
  /** The edge's Unix socket; or `host` and `port`. */
  socketPath?: string;
  host?: string;
  port?: number;
  token: string;
  /** Connections kept open to the edge (default 64); calls beyond wait for one. */
  maxSockets?: number;
  /** The caller's wall clock, the one the times it passes and is answered are on (default Date.now). */
  now?: () => number;
  /** TLS to `host` and `port`, the edge's certificate pinned by its SHA-256 fingerprint (`AB:CD:…`, what its join gave). */
  tls?: { fingerprint: string };
}

/** An EdgeApi reached over the edge protocol (see serveEdgeApi). */
export interface RemoteEdgeApi extends EdgeApi {
  /** Drops the connections (the edge itself runs on); calls after fail with `unavailable`. */
  disconnect(): void;
  /** Ms the edge's clock is ahead of the caller's (negative: behind), as last measured; null before the first answer. */
  clockOffsetMs(): number | null;
}

const broke = (cause?: unknown): WarrenError =>
  new WarrenError('unavailable', 'the connection to the edge broke', {}, cause === undefined ? undefined : { cause });

/** The WarrenError of an `error` frame: the code, message and details the edge threw. */
function errorOf(payload: Buffer): WarrenError {
  const { s, b } = JSON.parse(payload.toString('utf8')) as { s: number; b: unknown };
  return parseError(s, b);
}

/** What a command's event weighs in a reader's queue: its output's length, and a little for the event itself. */
function itemBytes(v: unknown): number {
  const data = (v as { data?: unknown }).data;
  return 64 + (typeof data === 'string' ? data.length : 0);
}

type OnFrame = (type: FrameType, payload: Buffer) => void;

/** One connection to the edge: the frames of the call in progress go to that call. */
class Connection {
  private readonly reader = new FrameReader(MAX_CALL_BYTES * 2 + 64);
  private on: OnFrame | null = null;
  private lost: ((e: Error) => void) | null = null;

  private readonly onData: (chunk: Buffer) => void;

  constructor(
    readonly socket: Socket,
    head: Buffer,
    gone: (c: Connection) => void,
  ) {
    socket.setNoDelay(true);
    const onData = (chunk: Buffer): void => {
      try {
        this.reader.push(chunk, (t, p) => {
          if (!this.on) throw new Error('a frame outside a call');
          this.on(t, p);
        });
      } catch {
        socket.destroy();
      }
    };
    this.onData = onData;
    socket.on('data', onData);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      gone(this);
      const lost = this.lost;
      this.on = this.lost = null;
      lost?.(broke());
    });
    if (head.length) onData(head);
  }

  /**
   * Ends the frames (from the `on` of a tunnel's `result`): the socket, paused, carries raw
   * bytes from here, the ones that came with that frame put back first.
   */
  detach(): Socket {
    this.finish();
    this.socket.pause();
    this.socket.off('data', this.onData);
    const early = this.reader.detach();
    if (early.length) this.socket.unshift(early);
    return this.socket;
  }

  /** Hands the frames that come to `on` (and a broken connection to `lost`) until `finish`. */
  begin(on: OnFrame, lost: (e: Error) => void): void {
    this.on = on;
    this.lost = lost;
  }

  finish(): void {
    this.on = this.lost = null;
  }

  /** Closed or being closed: no call goes on it. */
  get closed(): boolean {
    return this.socket.destroyed;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Connections to one edge: idle ones reused last-in first-out, at most `max` open, calls beyond queued. */
class Pool {
  private readonly idle: Connection[] = [];
  private readonly all = new Set<Connection>();
  /** Connections tunnels hold (dedicated). */
  private readonly tunnels = new Set<Connection>();
  private opening = 0;
  private readonly waiting: Array<{ resolve: (c: Connection) => void; reject: (e: Error) => void }> = [];
  private closed = false;

  constructor(
    private readonly o: RemoteEdgeOptions,
    private readonly clock: ClockOffset,
  ) {}

  /** An idle connection at once, or null. */
  take(): Connection | null {
    for (let c = this.idle.pop(); c; c = this.idle.pop()) if (!c.closed) return c;
    return null;
  }

  /**
   * A connection of its own for a tunnel (which holds it for as long as it carries bytes): not
   * one of the `maxSockets` the calls share, so open tunnels never hold calls up. Closed with
   * the pool.
   */
  dedicated(): Promise<Connection> {
    if (this.closed) return Promise.reject(new WarrenError('unavailable', 'the connection to the edge was closed', { started: false }));
    return this.open(false);
  }

  /** A connection: an idle one, a new one, or the next one freed. */
  acquire(): Promise<Connection> {
    const c = this.take();
    if (c) return Promise.resolve(c);
    if (this.closed) return Promise.reject(new WarrenError('unavailable', 'the connection to the edge was closed', { started: false }));
    if (this.all.size + this.opening < (this.o.maxSockets ?? 64)) return this.open();
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  release(c: Connection): void {
    if (c.closed) return;
    const w = this.waiting.shift();
    if (w) w.resolve(c);
    else this.idle.push(c);
  }

  close(): void {
    this.closed = true;
    for (const c of this.all) c.destroy();
    for (const c of this.tunnels) c.destroy();
    for (const w of this.waiting.splice(0)) w.reject(new WarrenError('unavailable', 'the connection to the edge was closed'));
  }

  private gone(c: Connection): void {
    if (this.tunnels.delete(c)) return;
    this.all.delete(c);
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
    // A call waiting for a connection gets a new one in its place.
    const w = this.closed ? undefined : this.waiting.shift();
    if (w) this.open().then(w.resolve, w.reject);
  }

  /** A new connection: the HTTP/1.1 upgrade to the edge protocol, with the token (`shared`: one of the calls'). */
  private open(shared = true): Promise<Connection> {
    if (shared) this.opening++;
    const tls = this.o.tls;
    return (tls ? connectPinned(this.o.host ?? 'localhost', this.o.port ?? 0, tls.fingerprint) : Promise.resolve(null))
      .then((secure) => this.upgrade(secure, shared))
      .finally(() => {
        if (shared) this.opening--;
      });
  }

  /** The upgrade request on a new connection (or on `secure`, a pinned TLS one). */
  private upgrade(secure: TLSSocket | null, shared: boolean): Promise<Connection> {
    const now = this.o.now ?? Date.now;
    const sent = now();
    return new Promise<Connection>((resolve, reject) => {
      const req = request({
        // On the TLS connection made for it; else a new one (no agent: with one, createConnection is not asked).
        ...(secure ? { createConnection: () => secure } : { agent: false, socketPath: this.o.socketPath, host: this.o.host, port: this.o.port }),
        method: 'GET',
        path: EDGE_PATH,
        headers: { authorization: `Bearer ${this.o.token}`, connection: 'upgrade', upgrade: EDGE_PROTOCOL },
      });
      req.once('upgrade', (res: IncomingMessage, socket: Socket, head: Buffer) => {
        const edgeNow = Number(res.headers[CLOCK_HEADER]);
        if (edgeNow) this.clock.sample(sent, edgeNow, now());
        const c = new Connection(socket, head, (x) => this.gone(x));
        if (this.closed) c.destroy();
        else (shared ? this.all : this.tunnels).add(c);
        resolve(c);
      });
      req.once('response', (res: IncomingMessage) => {
        collectBody(res, 1 << 20, () => broke()).then(
          (b) => {
            let parsed: unknown = null;
            try {
              parsed = JSON.parse(b.toString('utf8'));
            } catch {
              // not an error body: the status says what it can
            }
            reject(parseError(res.statusCode ?? 500, parsed));
          },
          (e: unknown) => reject(broke(e)),
        );
      });
      req.once('error', (e) => reject(new WarrenError('unavailable', `the edge cannot be reached: ${e.message}`, { started: false }, { cause: e })));
      req.end();
    });
  }
}

/** A call frame: the name and the arguments, without the trailing ones left out (JSON would make them null). */
function callFrame(name: EdgeCallName, args: unknown[]): Buffer {
  let n = args.length;
  while (n > 0 && args[n - 1] === undefined) n--;
  const json = encodeValue(n === args.length ? args : args.slice(0, n));
  if (json.length > MAX_CALL_BYTES) throw new WarrenError('payload_too_large', `an edge call is limited to ${MAX_CALL_BYTES} bytes`);
  return textFrame(FRAME.call, `{"c":"${name}","a":${json}}`);
}

/**
 * The client side of serveEdgeApi: every EdgeApi call as frames on one of a few kept-open
 * connections (one call at a time on each). What a call throws on the edge, it throws here (the
 * same WarrenError code, message and details); a broken connection is `unavailable`.
 * @example
 * const edge = remoteEdgeApi({ socketPath: '/var/lib/warren/run/edge.sock', token });
 * await edge.info();
 */
export function remoteEdgeApi(o: RemoteEdgeOptions): RemoteEdgeApi {
  const now = o.now ?? Date.now;
  const clock = new ClockOffset();
  const pool = new Pool(o, clock);

  /** Sends `frames` and answers the call's `result` (its value) or `error`; the result's edge clock is a sample of its offset. */
  const answer = (c: Connection, frames: Buffer[]): Promise<unknown> => {
    const sent = now();
    const answered = new Promise((resolve, reject) => {
      c.begin((t, p) => {
        c.finish();
        if (t !== FRAME.result && t !== FRAME.error) c.destroy();
        pool.release(c);
        if (t === FRAME.result) {
          const m = decodeValue(p.toString('utf8')) as { r: unknown; t?: unknown };
          if (typeof m.t === 'number') clock.sample(sent, m.t, now());
          resolve(m.r ?? undefined);
        } else if (t === FRAME.error) reject(errorOf(p));
        else reject(broke());
      }, reject);
    });
    // Written outside the callback's scope: a call that waits long (a stdin write) does not hold its frames once sent.
    if (frames.length === 1) c.socket.write(frames[0]!);
    else {
      c.socket.cork();
      for (const f of frames) c.socket.write(f);
      c.socket.uncork();
    }
    return answered;
  };

  const unary = async (name: EdgeCallName, args: unknown[]): Promise<unknown> => {
    const frame = callFrame(name, args);
    return answer(await pool.acquire(), [frame]);
  };

  /** A create's or claim's call: its files as raw bytes after the call (file-frames.ts). */
  const files = async (name: EdgeCallName, args: unknown[]): Promise<unknown> => {
    const parts = encodeFileCall([args[0]], (args[1] ?? []) as EdgeFile[]);
    const frames = [textFrame(FRAME.call, `{"c":"${name}"}`)];
    for (const p of parts)
      for (let at = 0; at < p.length; at += MAX_DATA_FRAME) {
        const part = p.subarray(at, at + MAX_DATA_FRAME);
        frames.push(frameHeader(FRAME.data, part.length), part);
      }
    frames.push(END_FRAME);
    return answer(await pool.acquire(), frames);
  };

  /** A call with a body in (writeFile, putArchive): the bytes as `data` frames until the edge answers or they end. */
  const bodyIn = async (name: EdgeCallName, args: unknown[]): Promise<void> => {
    const at = BODY_ARG[name] ?? args.length - 1;
    const body = args[at] as AsyncIterable<Uint8Array>;
    const frame = callFrame(name, [...args.slice(0, at), ...args.slice(at + 1)]);
    const c = await pool.acquire();
    let answered = false;
    const result = new Promise<void>((resolve, reject) => {
      c.begin((t, p) => {
        answered = true;
        c.finish();
        if (t === FRAME.result) resolve();
        else if (t === FRAME.error) reject(errorOf(p));
        else {
          c.destroy();
          reject(broke());
        }
      }, reject);
    });
    result.catch(() => undefined);
    c.socket.write(frame);
    try {
      // An answer that comes first (an error) stops the sending.
      for await (const chunk of body) if (answered || c.closed || !(await writeData(c.socket, chunk))) break;
    } catch (e) {
      c.destroy();
      throw e instanceof WarrenError ? e : new WarrenError('unavailable', `the body sent to the edge failed: ${String(e)}`, {}, { cause: e });
    }
    // The body's end follows what was sent, answered or not: the edge drops the rest until it.
    if (!c.closed) c.socket.write(END_FRAME);
    try {
      await result;
    } finally {
      pool.release(c);
    }
  };

  /** A call whose answer streams after its `result`: `data` frames (bytes) or `item` frames (values), to an `end` or an `error`. */
  const streamed = <T>(name: EdgeCallName, args: unknown[], kind: 'data' | 'item'): Promise<{ r: unknown; out: Inbox<T> }> => {
    const frame = callFrame(name, args);
    return pool.acquire().then(
      (c) =>
        new Promise((resolve, reject) => {
          let out: Inbox<T> | null = null;
          const done = (): void => {
            c.finish();
            pool.release(c);
          };
          c.begin(
            (t, p) => {
              if (!out) {
                if (t === FRAME.error) {
                  done();
                  return reject(errorOf(p));
                }
                if (t !== FRAME.result) {
                  c.destroy();
                  return reject(broke());
                }
                out = new Inbox<T>({
                  // A command's events weigh their output (one may carry 64 KiB): what is queued
                  // for a slow reader stays near a data frame's worth, not 1024 events of it.
                  size: kind === 'data' ? (v) => (v as Buffer).length : name === 'events' ? () => 1 : (v) => itemBytes(v),
                  high: kind === 'data' || name !== 'events' ? MAX_DATA_FRAME : 1024,
                  pause: () => c.socket.pause(),
                  resume: () => c.socket.resume(),
                  // A reader that stops early: the edge stops when the connection goes.
                  stopped: () => c.destroy(),
                });
                resolve({ r: (JSON.parse(p.toString('utf8')) as { r: unknown }).r, out });
              } else if (t === FRAME.data && kind === 'data') out.push(p as T);
              else if (t === FRAME.item && kind === 'item') out.push(JSON.parse(p.toString('utf8')) as T);
              else if (t === FRAME.end) {
                done();
                out.end();
              } else if (t === FRAME.error) {
                done();
                out.end(errorOf(p));
              } else {
                c.destroy();
                out.end(broke());
              }
            },
            (e) => (out ? out.end(e) : reject(e)),
          );
          c.socket.write(frame);
        }),
    );
  };

  /** A tunnel's call (openPort): on a connection of its own, which becomes the bytes both ways once the edge answers. */
  const tunnel = async (name: EdgeCallName, args: unknown[]): Promise<Duplex> => {
    const frame = callFrame(name, args);
    const c = await pool.dedicated();
    return new Promise<Duplex>((resolve, reject) => {
      c.begin((t, p) => {
        if (t === FRAME.result) return resolve(c.detach());
        c.destroy();
        reject(t === FRAME.error ? errorOf(p) : broke());
      }, reject);
      c.socket.write(frame);
    });
  };

  /** The edge's events: the call is made on the first read, and a reader that stops drops it. */
  const events = (after?: number): AsyncIterable<EdgeEvent> => ({
    [Symbol.asyncIterator](): AsyncIterator<EdgeEvent> {
      let it: Promise<AsyncIterator<EdgeEvent>> | null = null;
      let stopped = false;
      const open = (): Promise<AsyncIterator<EdgeEvent>> =>
        (it ??= streamed<EdgeEvent>('events', [after], 'item').then(({ out }) => {
          const i = out[Symbol.asyncIterator]();
          if (stopped) void i.return?.();
          return i;
        }));
      return {
        next: async () => {
          const r = await (await open()).next();
          return r.done ? r : { value: shiftEvent(r.value, -(clock.offsetMs ?? 0)), done: false };
        },
        return: async () => {
          stopped = true;
          if (it) await (await it.catch(() => null))?.return?.();
          return { value: undefined, done: true };
        },
      };
    },
  });

  const api: Record<string, (...a: unknown[]) => unknown> = {};
  for (const [n, kind] of Object.entries(EDGE_CALLS)) {
    const name = n as EdgeCallName;
    if (kind === 'unary') api[name] = (...args) => unary(name, args);
    else if (kind === 'files') api[name] = (...args) => files(name, args);
    else if (kind === 'body-in') api[name] = (...args) => bodyIn(name, args);
    else if (kind === 'body-out') api[name] = async (...args): Promise<AsyncIterable<Buffer>> => (await streamed<Buffer>(name, args, 'data')).out;
    else if (kind === 'command')
      api[name] = async (...args): Promise<CommandStream> => {
        const { r, out } = await streamed<ExecEvent>(name, args, 'item');
        const c = (r ?? {}) as { i?: unknown; p?: unknown };
        return { commandId: typeof c.i === 'string' ? c.i : '', pid: typeof c.p === 'number' ? c.p : 0, events: out };
      };
    else if (kind === 'tunnel') api[name] = (...args) => tunnel(name, args);
    else api[name] = (after?: unknown) => events(typeof after === 'number' ? after : undefined);
  }
  // Times go to the edge on its clock and come back on the caller's (clock.ts). A connection's
  // upgrade answer carries the edge's clock: the first timed call opens one first if need be.
  const offset = async (): Promise<number> => {
    if (clock.offsetMs === null) pool.release(await pool.acquire());
    return clock.offsetMs ?? 0;
  };
  for (const [n, shift] of Object.entries(CLOCKED)) {
    const call = api[n]!;
    api[n] = async (...args) => {
      const sent = shift.args ? shift.args(args, await offset()) : args;
      const r = await call(...sent);
      return shift.result ? shift.result(r, -(clock.offsetMs ?? 0)) : r;
    };
  }
  const remote = api as unknown as RemoteEdgeApi;
  remote.disconnect = () => pool.close();
  remote.clockOffsetMs = () => clock.offsetMs;
  return remote;
}
