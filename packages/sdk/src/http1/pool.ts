import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { encodeRequest } from './encode-request.js';
import { ResponseParser, type WholeAnswer } from './response-parser.js';

export interface Http1PoolOptions {
  /** Where to connect. */
  host: string;
  port: number;
  /** The Host header (host and port as the URL names them). */
  hostHeader: string;
  /** The most connections open at once; more requests wait for one (default 256, as the SDK's agent had). */
  maxSockets?: number;
  /**
   * HTTPS: connections are TLS (ALPN http/1.1), the certificate checked against Node's CAs, or
   * `ca` (PEM) instead where given, for `servername` (default: the host, unless it is an IP
   * address, which is then checked against the certificate's IP names). The session of a
   * verified connection is kept and resumed.
   */
  tls?: { servername?: string; ca?: string | string[] };
  /** Injected for tests. */
  now?: () => number;
  connect?: (host: string, port: number) => Socket;
}

/** How long a kept connection is used again when the server names no Keep-Alive timeout (Node's server keeps one 5 s). */
const DEFAULT_KEEP_MS = 5_000;
/** A kept connection is taken up to this long before the server's own timeout, never in its last moment. */
const KEEP_MARGIN_MS = 1_000;

type Settle = (err: Error | null, answer?: WholeAnswer) => void;

/** A request waiting for a connection: started on one, or failed when none can be made. */
interface Waiter {
  start: (c: Connection) => void;
  fail: (e: Error) => void;
}

/** One kept-open connection: at most one request on it at a time; its listeners stay for its life. */
class Connection {
  parser: ResponseParser | null = null;
  settle: Settle | null = null;
  /** Until when it may carry another request (ms, the pool's clock). */
  keepUntil = 0;
  dead = false;

  constructor(
    readonly socket: Socket,
    private readonly pool: Http1Pool,
  ) {
    socket.setNoDelay(true);
    // TCP keep-alive, as Node's agent sets it: a long call whose path silently dropped the flow
    // fails instead of waiting for ever.
    socket.setKeepAlive(true, 1_000);
    socket.on('data', (b: Buffer) => this.onData(b));
    socket.on('end', () => this.onEnd());
    socket.on('error', (e: Error) => this.fail(e));
    socket.on('close', () => this.fail(new Error('the connection closed')));
  }

  private onData(b: Buffer): void {
    // Bytes while idle: the server answered nothing anyone asked. The connection is not used again.
    if (!this.parser) return this.fail(new Error('bytes on an idle connection'));
    let answer: WholeAnswer | null;
    try {
      answer = this.parser.push(b);
    } catch (e) {
      return this.fail(e as Error);
    }
    if (answer) this.finish(answer);
  }

  private onEnd(): void {
    if (!this.parser) return this.fail(new Error('the connection closed'));
    let answer: WholeAnswer;
    try {
      answer = this.parser.end();
    } catch (e) {
      return this.fail(e as Error);
    }
    this.finish(answer);
  }

  private finish(answer: WholeAnswer): void {
    const settle = this.settle;
    this.parser = null;
    this.settle = null;
    this.pool.release(this, answer);
    settle?.(null, answer);
  }

  /** Ends the connection; the request on it, if any, fails with `err`. */
  fail(err: Error): void {
    const settle = this.settle;
    this.parser = null;
    this.settle = null;
    if (!this.dead) {
      this.dead = true;
      this.socket.destroy();
      this.pool.forget(this);
    }
    settle?.(err);
  }
}

/**
 * HTTP/1.1 to one origin over kept-open connections, for answers read whole: a request is one
 * write of one buffer, its answer parsed from the socket's bytes as they come
 * (`ResponseParser`), the connection then kept for the next request. Node's own client costs
 * about twice the CPU a call (its request and response objects, streams and agent bookkeeping);
 * on the hot paths (a command on a warm session, a small file) that was a third of a round trip.
 * A kept connection is used again up to a second before the server's `Keep-Alive: timeout`, and
 * dropped as soon as the server closes it or its time is up. A request is never sent twice: like Node's agent, a
 * request on a kept connection the server closed at the same moment fails (it may have been
 * taken), and the caller decides. Idle connections do not hold the process open.
 * @example
 * const pool = new Http1Pool({ host: '127.0.0.1', port: 7070, hostHeader: '127.0.0.1:7070' });
 * const answer = await pool.request('GET', '/v1/info', { authorization: 'Bearer k' });
 */
export class Http1Pool {
  private readonly idle: Connection[] = [];
  private readonly waiting: Waiter[] = [];
  /** The sweep of idle connections whose keep time is up (unref'd: it holds no process open). */
  private sweep: NodeJS.Timeout | null = null;
  private open = 0;
  private readonly max: number;
  private readonly now: () => number;
  private readonly connect: (host: string, port: number) => Socket;
  /** The last TLS session a server gave, for the next connection to resume. */
  private session: Buffer | undefined;

  constructor(private readonly o: Http1PoolOptions) {
    this.max = o.maxSockets ?? 256;
    this.now = o.now ?? Date.now;
    const tls = o.tls;
    this.connect = o.connect ?? (tls ? (host, port) => this.secure(host, port, tls) : (host, port) => netConnect({ host, port }));
  }

  /** A TLS connection, resuming the last session this pool was given (a full handshake costs ~1 ms of CPU). */
  private secure(host: string, port: number, tls: NonNullable<Http1PoolOptions['tls']>): Socket {
    const servername = tls.servername ?? (isIP(host) ? undefined : host);
    const socket = tlsConnect({ host, port, servername, ca: tls.ca, ALPNProtocols: ['http/1.1'], session: this.session });
    // Node verifies the peer before it hands out a session; kept only from a verified one anyway
    // (a resumed session skips the name check).
    socket.on('session', (s: Buffer) => {
      if (socket.authorized) this.session = s;
    });
    return socket;
  }

  /** Sends one request and answers its answer whole; a broken connection or a malformed answer rejects. */
  request(method: string, target: string, headers: Record<string, string>, body?: string | Uint8Array, signal?: AbortSignal): Promise<WholeAnswer> {
    // Encoded first: a header that cannot be sent rejects before any connection is taken.
    let bytes: Uint8Array[];
    try {
      bytes = encodeRequest(method, target, this.o.hostHeader, headers, body);
    } catch (e) {
      return Promise.reject(e as Error);
    }
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    return new Promise((resolve, reject) => {
      let conn: Connection | null = null;
      let queued: Waiter | null = null;
      const onAbort = (): void => {
        if (conn) conn.fail(abortReason(signal!));
        else {
          const i = queued ? this.waiting.indexOf(queued) : -1;
          if (i >= 0) this.waiting.splice(i, 1);
          reject(abortReason(signal!));
        }
      };
      const start = (c: Connection): void => {
        conn = c;
        c.parser = new ResponseParser(method);
        c.settle = (err, answer) => {
          signal?.removeEventListener('abort', onAbort);
          if (err) reject(err);
          else resolve(answer!);
        };
        if (bytes.length === 1) c.socket.write(bytes[0]!);
        else {
          c.socket.cork();
          for (const b of bytes) c.socket.write(b);
          c.socket.uncork();
        }
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      let c: Connection | null;
      try {
        c = this.take();
      } catch (e) {
        signal?.removeEventListener('abort', onAbort);
        return reject(e as Error);
      }
      if (c) start(c);
      else {
        queued = {
          start,
          fail: (e) => {
            signal?.removeEventListener('abort', onAbort);
            reject(e);
          },
        };
        this.waiting.push(queued);
      }
    });
  }

  /** Closes the idle connections (requests under way finish on theirs). */
  close(): void {
    for (const c of this.idle.splice(0)) c.fail(new Error('the pool closed'));
    if (this.sweep) clearTimeout(this.sweep);
    this.sweep = null;
  }

  /** An idle connection still in its keep time, or a new one while under the limit; null: wait. */
  private take(): Connection | null {
    const now = this.now();
    // A connection that ended left the idle list then (forget).
    for (let c = this.idle.pop(); c; c = this.idle.pop()) {
      if (now >= c.keepUntil) {
        c.fail(new Error('kept too long'));
        continue;
      }
      c.socket.ref();
      return c;
    }
    if (this.open >= this.max) return null;
    const socket = this.connect(this.o.host, this.o.port);
    this.open++;
    return new Connection(socket, this);
  }

  /** A request's answer is in: the connection goes to the next waiting request, or idles, or is closed. */
  release(c: Connection, answer: WholeAnswer): void {
    if (!answer.keepAlive || c.dead) {
      c.fail(new Error('not kept'));
      return;
    }
    const next = this.waiting.shift();
    if (next) return next.start(c);
    c.keepUntil = this.now() + Math.max(0, (answer.keepAliveMs ?? DEFAULT_KEEP_MS) - KEEP_MARGIN_MS);
    c.socket.unref();
    this.idle.push(c);
    this.sweepAt(c.keepUntil);
  }

  /** Ends the idle connections whose keep time is up by `at` (then at the next one's). */
  private sweepAt(at: number): void {
    if (this.sweep) return;
    this.sweep = setTimeout(
      () => {
        this.sweep = null;
        const now = this.now();
        for (const c of this.idle.filter((k) => now >= k.keepUntil)) c.fail(new Error('kept too long'));
        if (this.idle.length) this.sweepAt(Math.min(...this.idle.map((k) => k.keepUntil)));
      },
      Math.max(0, at - this.now()) + 10,
    );
    this.sweep.unref();
  }

  /** A connection ended: no longer counted or kept; a waiting request gets a new one. */
  forget(c: Connection): void {
    this.open--;
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
    const next = this.waiting.shift();
    if (!next) return;
    let fresh: Connection | null;
    try {
      fresh = this.take();
    } catch (e) {
      return next.fail(e as Error);
    }
    if (fresh) next.start(fresh);
    else this.waiting.unshift(next);
  }
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new DOMException('This operation was aborted', 'AbortError');
}
