import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { WarrenError } from '@warren/api';
import { REPLY, REQ, FrameDecoder, decodeFields, encodeFields, encodeFrame, type Fields, type Frame } from './frame.js';
import { errnoError } from './errno.js';
import { KeptConnections } from './kept-connections.js';

/**
 * What unread frames of one call may hold before its socket is paused, in bytes (each frame
 * counted with an overhead, so that empty ones weigh too): a reader that is slow (a file going to
 * a slow client) holds the init back, not the edge's memory.
 */
const HIGH_WATER_BYTES = 1024 * 1024;
const FRAME_OVERHEAD = 64;
/**
 * What a call may have written that its socket has not sent: its writers wait for drain (stdin,
 * file bodies), so only a broken one gets here, and it fails rather than growing the edge.
 */
export const MAX_UNSENT_BYTES = 8 * 1024 * 1024;

/** How a wait for a socket to take what was written ended. */
export type Drained = 'drained' | 'closed' | 'timeout';

/**
 * How the edge reaches a sandbox's agent (its init): a new duplex connection per call, whatever
 * carries it (a Unix socket for a container, a vsock or a serial port for a VM); with `kept`
 * (an init of protocol version 2 on), a call takes a kept one first and keeps its own after.
 */
export type AgentConnect = (() => Promise<Duplex>) & { kept?: KeptConnections };

/** The frame that asks a new connection to be kept (REQUESTS.reuse). */
const KEEP_FRAME = encodeFrame(REQ.reuse);

/**
 * An AgentConnect over a Unix socket the host sees (a container's init listens on one); `keep`:
 * the init speaks protocol version 2, so its connections are kept for the next calls.
 */
export function unixAgent(socketPath: string, o: { keep?: boolean } = {}): AgentConnect {
  const agent: AgentConnect = () =>
    new Promise((resolve, reject) => {
      const socket = connect(socketPath);
      const onError = (e: Error): void => {
        socket.destroy();
        reject(new WarrenError('unavailable', 'sandbox init is not reachable', {}, { cause: e }));
      };
      socket.once('error', onError);
      socket.once('connect', () => {
        socket.off('error', onError);
        socket.setNoDelay(true);
        resolve(socket);
      });
    });
  if (o.keep) agent.kept = new KeptConnections();
  return agent;
}

/**
 * One operation on warren-init: a connection, its request frame, then frames both ways.
 * Frames are read with {@link next}; the socket is paused while unread frames pile up, so a
 * slow reader holds the command back instead of growing memory.
 */
export class InitCall {
  private readonly socket: Duplex;
  private readonly decoder = new FrameDecoder();
  private queue: Frame[] = [];
  private queued = 0;
  private waiter: ((f: Frame | null) => void) | null = null;
  private ended = false;
  private error: Error | null = null;
  /** The call ended with `y`: its connection went back to `kept` (nothing more is sent or read here). */
  private released = false;

  private constructor(
    socket: Duplex,
    private readonly kept?: KeptConnections,
  ) {
    this.socket = socket;
    socket.on('data', this.onData);
    socket.on('error', this.onError);
    socket.on('close', this.onClose);
  }

  private readonly onData = (d: Buffer): void => {
    let frames: Frame[];
    try {
      frames = this.decoder.push(d);
    } catch (e) {
      // A frame the init could not have sent: the connection is reset, nothing more is read from it.
      this.fail(e instanceof Error ? e : new Error(String(e)));
      this.socket.destroy();
      return;
    }
    for (let i = 0; i < frames.length; i++) {
      const f = frames[i]!;
      if (f.type !== REPLY.ready) {
        this.deliver(f);
        continue;
      }
      // The call's end on a kept connection: nothing may follow it until the next request.
      if (this.kept && i === frames.length - 1 && this.decoder.empty) this.release();
      else {
        this.fail(new Error('the init said ready where it may not'));
        this.socket.destroy();
      }
      return;
    }
    if (this.queued > HIGH_WATER_BYTES) this.socket.pause();
  };

  private readonly onError = (e: Error): void => this.fail(e);
  private readonly onClose = (): void => this.finish();

  /**
   * Connects to the sandbox's agent (or takes a kept connection) and sends the request; a new
   * connection to an init that keeps them asks for it first, in the same write.
   */
  static async open(agent: AgentConnect, type: string, fields: Fields = []): Promise<InitCall> {
    const kept = agent.kept;
    const reused = kept?.take();
    const socket = reused ?? (await agent());
    const keep = kept !== undefined && kept.open;
    const call = new InitCall(socket, keep ? kept : undefined);
    const request = encodeFrame(type, encodeFields(fields));
    socket.write(keep && !reused ? Buffer.concat([KEEP_FRAME, request]) : request);
    return call;
  }

  /** The call ended with `y`: the connection goes back to be kept; the call reads as ended. */
  private release(): void {
    const s = this.socket;
    s.off('data', this.onData);
    s.off('error', this.onError);
    s.off('close', this.onClose);
    this.released = true;
    this.finish();
    this.kept!.give(s);
  }

  /**
   * Writes a frame; false when the socket wants a drain first (or is gone). resource_exhausted when
   * more than MAX_UNSENT_BYTES wait in it already (a writer that ignored drain, or a peer that
   * stopped reading long ago).
   */
  send(type: string, payload?: Buffer): boolean {
    if (this.released || this.socket.destroyed) return false;
    if (this.socket.writableLength > MAX_UNSENT_BYTES)
      throw new WarrenError('resource_exhausted', 'the sandbox init is not taking what is sent to it', { unsentBytes: this.socket.writableLength });
    return this.socket.write(encodeFrame(type, payload));
  }

  sendFields(type: string, fields: Fields): boolean {
    return this.send(type, encodeFields(fields));
  }

  /** Whether the connection is gone (nothing written now reaches the init). */
  get closed(): boolean {
    return this.released || this.socket.destroyed;
  }

  /**
   * Resolves once the socket has taken what was written ('drained'), or when it closed first, or
   * `timeoutMs` passed (default: no limit).
   */
  drain(timeoutMs?: number): Promise<Drained> {
    if (this.released || this.socket.destroyed) return Promise.resolve('closed');
    if (!this.socket.writableNeedDrain) return Promise.resolve('drained');
    if (timeoutMs !== undefined && timeoutMs <= 0) return Promise.resolve('timeout');
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | null = null;
      const done = (how: Drained) => (): void => {
        this.socket.off('drain', onDrain);
        this.socket.off('close', onClose);
        if (timer) clearTimeout(timer);
        resolve(how);
      };
      const onDrain = done('drained');
      const onClose = done('closed');
      this.socket.once('drain', onDrain);
      this.socket.once('close', onClose);
      if (timeoutMs !== undefined) timer = setTimeout(done('timeout'), timeoutMs);
    });
  }

  /** The next frame, or null at the end of the connection. Rejects if the connection broke. */
  next(): Promise<Frame | null> {
    const f = this.queue.shift();
    if (f) {
      this.queued -= f.payload.length + FRAME_OVERHEAD;
      if (!this.released && this.queued < HIGH_WATER_BYTES / 2 && this.socket.isPaused()) this.socket.resume();
      return Promise.resolve(f);
    }
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      this.waiter = (frame) => {
        if (frame === null && this.error) reject(this.error);
        else resolve(frame);
      };
    });
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    if (!this.released) this.socket.destroy();
  }

  private timer: NodeJS.Timeout | null = null;

  /**
   * Fails the call with deadline_exceeded unless it ends within `ms`: an init that stopped
   * answering (frozen, stuck, hostile) must not hold its caller forever.
   */
  deadline(ms: number, what: string): this {
    if (this.ended) return this;
    this.timer = setTimeout(() => {
      this.error ??= new WarrenError('deadline_exceeded', `the sandbox init did not answer ${what} within ${ms} ms`);
      this.socket.destroy();
      this.finish();
    }, ms);
    this.timer.unref();
    return this;
  }

  private deliver(f: Frame): void {
    const w = this.waiter;
    if (w) {
      this.waiter = null;
      w(f);
    } else {
      this.queue.push(f);
      this.queued += f.payload.length + FRAME_OVERHEAD;
    }
  }

  private fail(e: Error): void {
    this.error ??= new WarrenError('unavailable', 'lost the connection to the sandbox init', {}, { cause: e });
    this.finish();
  }

  private finish(): void {
    if (this.timer) clearTimeout(this.timer);
    this.ended = true;
    const w = this.waiter;
    this.waiter = null;
    w?.(null);
  }
}

/** Reads frames until `x` (returns its fields) or `f` (throws the mapped error); collects `e` entries. */
export async function finishCall(call: InitCall, details: Record<string, unknown> = {}, onFrame?: (f: Frame) => void): Promise<Map<string, string[]>> {
  try {
    for (;;) {
      const f = await call.next();
      if (f === null) throw new WarrenError('unavailable', 'the sandbox init closed the connection', details);
      if (f.type === REPLY.done) return decodeFields(f.payload);
      if (f.type === REPLY.failed) throw failure(f, details);
      onFrame?.(f);
    }
  } finally {
    call.close();
  }
}

/** The Warren error for an `f` frame. */
export function failure(f: Frame, details: Record<string, unknown> = {}): WarrenError {
  const fields = decodeFields(f.payload);
  return errnoError(Number(fields.get('n')?.[0] ?? 0), fields.get('m')?.[0] ?? '', details);
}

/** How long a one-shot request may take by default (stat, mkdir, move, ending a session). */
export const SIMPLE_CALL_TIMEOUT_MS = 60_000;

/** A one-shot request: open, send, wait for `x` (deadline_exceeded after `timeoutMs`). */
export async function simpleCall(
  agent: AgentConnect,
  type: string,
  fields: Fields,
  details: Record<string, unknown> = {},
  timeoutMs = SIMPLE_CALL_TIMEOUT_MS,
): Promise<Map<string, string[]>> {
  const call = await InitCall.open(agent, type, fields);
  return finishCall(call.deadline(timeoutMs, type), details);
}
