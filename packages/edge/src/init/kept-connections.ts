import type { Duplex } from 'node:stream';

/** Idle kept connections on the node, all inits together: past it a connection is closed, not kept. */
export const MAX_KEPT_ON_NODE = 4096;
/** Idle kept connections to one init: enough for a caller's next call, and one beside it. */
export const MAX_KEPT_PER_INIT = 2;
/** How long a kept connection waits unused before it is closed (ms). */
export const KEPT_IDLE_MS = 30_000;

let keptOnNode = 0;

interface Idle {
  socket: Duplex;
  timer: NodeJS.Timeout;
  drop: () => void;
}

/**
 * Connections to one init that took `Y` (protocol version 2): after a call's last frame the init
 * answers `y` and takes the next request on the same connection, so the next call skips a
 * connect, an accept and two closes. An idle one that closes, errs or says anything is dropped.
 */
export class KeptConnections {
  private readonly idle: Idle[] = [];
  private closed = false;

  /** Whether a new connection should be asked to be kept (`Y` before its first request). */
  get open(): boolean {
    return !this.closed;
  }

  /** A kept idle connection, newest first; undefined when there is none. */
  take(): Duplex | undefined {
    for (let i = this.idle.pop(); i; i = this.idle.pop()) {
      this.forget(i);
      if (!i.socket.destroyed) return i.socket;
    }
    return undefined;
  }

  /** Keeps a connection whose call ended with `y` (nothing unread, no listener of the call left); else closes it. */
  give(socket: Duplex): void {
    if (this.closed || socket.destroyed || this.idle.length >= MAX_KEPT_PER_INIT || keptOnNode >= MAX_KEPT_ON_NODE) {
      socket.destroy();
      return;
    }
    const i: Idle = {
      socket,
      timer: setTimeout(() => i.drop(), KEPT_IDLE_MS).unref(),
      drop: () => {
        const at = this.idle.indexOf(i);
        if (at >= 0) {
          this.idle.splice(at, 1);
          this.forget(i);
        }
        socket.destroy();
      },
    };
    socket.on('data', i.drop);
    socket.on('error', i.drop);
    socket.on('close', i.drop);
    socket.resume();
    this.idle.push(i);
    keptOnNode++;
  }

  /** Closes the idle ones and keeps no more (the sandbox is paused, or gone). */
  close(): void {
    this.closed = true;
    for (let i = this.idle.pop(); i; i = this.idle.pop()) {
      this.forget(i);
      i.socket.destroy();
    }
  }

  /** Lets the connections be kept again (a paused sandbox resumed). */
  reopen(): void {
    this.closed = false;
  }

  private forget(i: Idle): void {
    clearTimeout(i.timer);
    i.socket.off('data', i.drop);
    i.socket.off('error', i.drop);
    i.socket.off('close', i.drop);
    keptOnNode--;
  }
}

/** Idle kept connections on the node now (for tests and metrics). */
export function keptConnectionsOnNode(): number {
  return keptOnNode;
}
