import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { WarrenError } from '@warren/api';
import { REPLY, FrameDecoder, decodeFields, encodeFields, encodeFrame, type Fields, type Frame } from './frame.js';
import { errnoError } from './errno.js';

const HIGH_WATER_FRAMES = 64;

/**
 * How the edge reaches a sandbox's agent (its init): a new duplex connection per call, whatever
 * carries it (a Unix socket for a container, a vsock or a serial port for a VM).
 */
export type AgentConnect = () => Promise<Duplex>;

/** An AgentConnect over a Unix socket the host sees (a container's init listens on one). */
export function unixAgent(socketPath: string): AgentConnect {
  return () =>
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
  private waiter: ((f: Frame | null) => void) | null = null;
  private ended = false;
  private error: Error | null = null;

  private constructor(socket: Duplex) {
    this.socket = socket;
    socket.on('data', (d: Buffer) => {
      let frames: Frame[];
      try {
        frames = this.decoder.push(d);
      } catch (e) {
        this.fail(e instanceof Error ? e : new Error(String(e)));
        return;
      }
      for (const f of frames) this.deliver(f);
      if (this.queue.length > HIGH_WATER_FRAMES) socket.pause();
    });
    socket.on('error', (e) => this.fail(e));
    socket.on('close', () => this.finish());
  }

  /** Connects to the sandbox's agent and sends the request. */
  static async open(agent: AgentConnect, type: string, fields: Fields = []): Promise<InitCall> {
    const socket = await agent();
    const call = new InitCall(socket);
    socket.write(encodeFrame(type, encodeFields(fields)));
    return call;
  }

  send(type: string, payload?: Buffer): boolean {
    if (this.socket.destroyed) return false;
    return this.socket.write(encodeFrame(type, payload));
  }

  sendFields(type: string, fields: Fields): boolean {
    return this.send(type, encodeFields(fields));
  }

  /** Resolves when the socket can take more (for streaming uploads). */
  drain(): Promise<void> {
    if (!this.socket.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        this.socket.off('drain', done);
        this.socket.off('close', done);
        resolve();
      };
      this.socket.once('drain', done);
      this.socket.once('close', done);
    });
  }

  /** The next frame, or null at the end of the connection. Rejects if the connection broke. */
  next(): Promise<Frame | null> {
    const f = this.queue.shift();
    if (f) {
      if (this.queue.length < HIGH_WATER_FRAMES / 2 && this.socket.isPaused()) this.socket.resume();
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
    this.socket.destroy();
  }

  private timer: NodeJS.Timeout | null = null;

  /**
   * Fails the call with deadline_exceeded unless it ends within `ms`: an init that stopped
   * answering (frozen, stuck, hostile) must not hold its caller forever.
   */
  deadline(ms: number, what: string): this {
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
    } else this.queue.push(f);
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
