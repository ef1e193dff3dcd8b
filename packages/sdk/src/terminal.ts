import type { Socket } from 'node:net';
import { WS_OPCODE, WarrenError, WsDecoder, wsClosePayload, wsFrame } from '@warren/api';

/** What a terminal showed before anyone listened, kept at most (bytes). */
const MAX_BACKLOG = 1024 * 1024;

/** How a terminal's shell ended. */
export interface TerminalExit {
  exitCode: number | null;
  signal: string | null;
}

/**
 * A login shell on a terminal in a sandbox (`GET /v1/sandboxes/{id}/pty`, a WebSocket): what
 * is written is typed, `onData` gets what the terminal shows, `resize` follows a window.
 * `exited` settles when the shell ends (or rejects if the connection is lost first).
 */
export class Terminal {
  readonly exited: Promise<TerminalExit>;
  private readonly listeners = new Set<(data: Uint8Array) => void>();
  private readonly backlog: Buffer[] = [];
  private backlogBytes = 0;
  private closed = false;

  constructor(
    private readonly socket: Socket,
    head: Buffer,
    /** The command the shell is (listed, signalled and re-read like any). */
    readonly commandId: string,
  ) {
    const decoder = new WsDecoder(false, 64 * 1024 * 1024);
    let exit: TerminalExit | null = null;
    this.exited = new Promise<TerminalExit>((resolve, reject) => {
      const onData = (chunk: Buffer): void => {
        let messages;
        try {
          messages = decoder.push(chunk);
        } catch (e) {
          socket.destroy();
          reject(new WarrenError('unavailable', `the terminal's connection broke: ${(e as Error).message}`));
          return;
        }
        for (const m of messages) {
          if (m.opcode === WS_OPCODE.binary) this.emit(m.payload);
          else if (m.opcode === WS_OPCODE.text) {
            const v = control(m.payload.toString('utf8'));
            if (v.type === 'exit') exit = { exitCode: v.exitCode ?? null, signal: v.signal ?? null };
            else if (v.type === 'error' && v.error) reject(new WarrenError(v.error.code as never, v.error.message));
          } else if (m.opcode === WS_OPCODE.ping) this.send(WS_OPCODE.pong, m.payload);
          else if (m.opcode === WS_OPCODE.close) {
            this.send(WS_OPCODE.close, m.payload.subarray(0, 2));
            this.closed = true;
            socket.end();
          }
        }
      };
      socket.on('data', onData);
      socket.on('error', () => undefined);
      socket.once('close', () => {
        this.closed = true;
        if (exit) resolve(exit);
        else reject(new WarrenError('unavailable', 'the terminal closed before its shell ended'));
      });
      if (head.length) onData(head);
    });
    this.exited.catch(() => undefined);
  }

  /** Gets what the terminal shows from now on (what came before any listener is given to the first). */
  onData(listener: (data: Uint8Array) => void): () => void {
    this.listeners.add(listener);
    for (const b of this.backlog.splice(0)) listener(b);
    this.backlogBytes = 0;
    return () => this.listeners.delete(listener);
  }

  /**
   * Types `data` (keys, a paste, control characters such as "\x03" for ^C). Answers false when the
   * connection holds more than it should (the sandbox reads its input slower than it comes): wait
   * for `drained()` before writing more, as with a Node stream.
   */
  write(data: string | Uint8Array): boolean {
    return this.send(WS_OPCODE.binary, typeof data === 'string' ? Buffer.from(data) : Buffer.from(data));
  }

  /** Resolves when what was written has been sent on (or the terminal has closed). */
  drained(): Promise<void> {
    const s = this.socket;
    if (this.closed || s.destroyed || s.writableLength === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        s.off('drain', done);
        s.off('close', done);
        resolve();
      };
      s.on('drain', done);
      s.on('close', done);
    });
  }

  resize(cols: number, rows: number): void {
    this.send(WS_OPCODE.text, Buffer.from(JSON.stringify({ type: 'resize', cols, rows })));
  }

  /** Closes the terminal: its shell is hung up (SIGHUP). */
  close(): void {
    this.send(WS_OPCODE.close, wsClosePayload(1000));
    this.closed = true;
    this.socket.end();
  }

  private emit(b: Buffer): void {
    for (const l of this.listeners) l(b);
    if (this.listeners.size) return;
    // Held for the first listener: the last MiB of it.
    this.backlog.push(b);
    this.backlogBytes += b.length;
    while (this.backlogBytes > MAX_BACKLOG && this.backlog.length > 1) this.backlogBytes -= this.backlog.shift()!.length;
  }

  /** False when the socket's buffer is past its mark (see `write`). */
  private send(opcode: number, payload: Buffer): boolean {
    if (this.closed || !this.socket.writable) return true;
    return this.socket.write(wsFrame(opcode, payload, true));
  }
}

/** A text message from the server (its exit, or an error); one that is not JSON says nothing. */
function control(text: string): { type?: string; exitCode?: number | null; signal?: string | null; error?: { code: string; message: string } } {
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'object' && v !== null ? v : {};
  } catch {
    return {};
  }
}
