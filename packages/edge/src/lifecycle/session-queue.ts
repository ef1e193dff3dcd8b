import { MAX_QUEUED_SESSION_COMMANDS, WarrenError } from '@warren/api';
import type { Drained, InitCall } from '../init/call.js';
import { REPLY, REQ, type Frame } from '../init/frame.js';
import type { CommandCall } from './command.js';

/** Starts a command in the session: resolves once the init took it (its `started` frame read). */
export type SessionStart = () => Promise<InitCall>;

/**
 * One shell session's commands on the edge: the one it runs and those that wait their turn, in
 * the order they arrived. The init runs one command per session at a time (a second one is
 * refused with EBUSY); the edge holds the rest here, so every client and both transports see
 * one queue, whatever order their calls come in on their many connections.
 */
export class SessionLine {
  private running = false;
  private readonly waiting: SessionTurn[] = [];

  constructor(
    /** Called when the line has nothing left to run (its owner forgets it). */
    private readonly onIdle: () => void,
    /** Awaited before a waiting command starts (the sandbox resumed if it was paused meanwhile). */
    private readonly ready: () => Promise<unknown>,
  ) {}

  /**
   * The call of a new command: started now when the session is free (errors thrown as they come),
   * else a turn that waits behind the others (resource_exhausted past the bound).
   */
  async take(start: SessionStart, onStart: () => void): Promise<CommandCall> {
    if (!this.running && this.waiting.length === 0) {
      this.running = true;
      try {
        return new SessionTurn(this, start, onStart, await start());
      } catch (e) {
        this.next();
        throw e;
      }
    }
    if (this.waiting.length >= MAX_QUEUED_SESSION_COMMANDS)
      throw new WarrenError('resource_exhausted', `the session has ${MAX_QUEUED_SESSION_COMMANDS} commands waiting their turn already`, {
        maxQueuedCommands: MAX_QUEUED_SESSION_COMMANDS,
      });
    const turn = new SessionTurn(this, start, onStart, null);
    this.waiting.push(turn);
    return turn;
  }

  /** Ends every waiting command with `error` (they never run); the one running is left to end. */
  endWaiting(error: WarrenError): void {
    for (const t of this.waiting.splice(0)) t.never(error);
    if (!this.running) this.onIdle();
  }

  /** The running command ended (or never started): the next one in line starts. */
  next(): void {
    this.running = false;
    const turn = this.waiting.shift();
    if (!turn) {
      this.onIdle();
      return;
    }
    this.running = true;
    void this.ready()
      .then(() => turn.begin())
      .catch((e: unknown) => {
        turn.never(e instanceof WarrenError ? e : new WarrenError('unavailable', 'the session could not take the command'));
        this.next();
      });
  }

  /** Takes a waiting command out of the line (killed before its turn); false if it is not waiting. */
  leave(turn: SessionTurn): boolean {
    const i = this.waiting.indexOf(turn);
    if (i < 0) return false;
    this.waiting.splice(i, 1);
    if (!this.running && this.waiting.length === 0) this.onIdle();
    return true;
  }
}

/**
 * The call of one command in a session. Until its turn comes it holds the command's place: its
 * frames start when the session takes it; a signal drops it (it ends as killed, having never
 * run); ending the session or the sandbox ends it with that error.
 */
class SessionTurn implements CommandCall {
  /** Settles when its turn is decided: the call it runs on, or the frame it ends with having never run. */
  private readonly outcome: Promise<{ call: InitCall } | { end: Frame }>;
  private settle: (o: { call: InitCall } | { end: Frame }) => void = () => undefined;
  private refuse: (e: WarrenError) => void = () => undefined;
  private released = false;
  /** A signal sent while its start was under way: delivered once it runs. */
  private lateSignal: Buffer | null = null;

  constructor(
    private readonly line: SessionLine,
    private readonly start: SessionStart,
    private readonly onStart: () => void,
    private call: InitCall | null,
  ) {
    this.outcome = new Promise((resolve, reject) => {
      this.settle = resolve;
      this.refuse = reject;
    });
    // Read only by next(): a command that never ran must not leave an unhandled rejection.
    this.outcome.catch(() => undefined);
  }

  /** Its turn came: starts it in the session; a failure to start ends it and passes the turn on. */
  async begin(): Promise<void> {
    const call = await this.start();
    this.onStart();
    this.call = call;
    if (this.lateSignal) call.send(REQ.signal, this.lateSignal);
    this.settle({ call });
  }

  /** It never runs: its first read fails with `error`. */
  never(error: WarrenError): void {
    this.released = true;
    this.refuse(error);
  }

  async next(): Promise<Frame | null> {
    if (this.call) return this.call.next();
    const o = await this.outcome;
    return 'end' in o ? o.end : o.call.next();
  }

  send(type: string, payload?: Buffer): boolean {
    if (this.call) return this.call.send(type, payload);
    // Killed while it waits: it leaves the line and ends as killed by that signal (the payload
    // names it as the exit's `s` field does), never having run.
    if (type !== REQ.signal) return false;
    if (this.line.leave(this)) {
      this.released = true;
      this.onStart();
      this.settle({ end: { type: REPLY.done, payload: payload ?? Buffer.alloc(0) } });
    } else if (!this.released) this.lateSignal = payload ?? Buffer.alloc(0);
    return true;
  }

  drain(timeoutMs?: number): Promise<Drained> {
    return this.call ? this.call.drain(timeoutMs) : Promise.resolve('drained');
  }

  get closed(): boolean {
    return this.call?.closed ?? false;
  }

  /** The command is over: the session is free for the next one. */
  close(): void {
    this.call?.close();
    if (this.released) return;
    this.released = true;
    this.line.next();
  }
}
