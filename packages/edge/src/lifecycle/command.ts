import { constants } from 'node:os';
import type { CommandInfo, ExecEvent, ExitEvent, LimitHit, TerminalSize } from '@warren/api';
import { WarrenError } from '@warren/api';
import type { InitCall } from '../init/call.js';
import { REPLY, REQ, decodeFields, encodeFields } from '../init/frame.js';
import { failure } from '../init/call.js';
import { takeFromAll, type OutputBudget } from './output-budget.js';
import { CommandOutput, type OutputStream } from './command-output.js';
import type { StdinHold } from './stdin-budget.js';

export type { OutputStream } from './command-output.js';

/**
 * Stdin bytes one command may have waiting for the sandbox to take them, over all its writes: a
 * write past it answers resource_exhausted (one write alone may be bigger: its route bounds it).
 */
export const MAX_PENDING_STDIN_BYTES = 16 * 1024 * 1024;
/** How long a write to stdin may wait for the sandbox to take its bytes (resource_exhausted after). */
export const STDIN_DEADLINE_MS = 30_000;
/** Stdin goes to the init in frames of this size, each written once the one before is taken. */
const STDIN_FRAME_BYTES = 1024 * 1024;

/** What a command's frames come through: its init call (a session's command: its turn, see SessionLine). */
export type CommandCall = Pick<InitCall, 'next' | 'send' | 'close' | 'drain' | 'closed'>;

/**
 * What a finished command holds instead of its call: the call (its socket, its frame decoder) goes
 * with its end, not with the command, which is kept for minutes after (its output re-read).
 */
const ENDED_CALL: CommandCall = {
  next: () => Promise.resolve(null),
  send: () => false,
  close: () => undefined,
  drain: () => Promise.resolve('closed'),
  closed: true,
};

const SIGNAL_NAMES = new Map<number, string>(Object.entries(constants.signals).map(([name, n]) => [n, name]));
/** The signals a kill through the API ends a command with. */
const TERMINATING = new Set(['SIGTERM', 'SIGKILL', 'SIGINT', 'SIGHUP', 'SIGQUIT']);

export interface CommandOptions {
  /** Budgets its output is held in (the node's, its tenant's share; see OutputBudget); none: only `maxOutputBytes` bounds it. */
  budgets?: OutputBudget[];
  /** The node's budgets its stdin is held in while it waits (StdinBudgets); none: only MAX_PENDING_STDIN_BYTES bounds it. */
  stdin?: StdinHold;
  /** How long a stdin write may wait (default STDIN_DEADLINE_MS). */
  stdinDeadlineMs?: number;
  /**
   * Signals it by its pid on a connection of its own (see signal); false: not now (its sandbox is
   * paused), so the signal goes on its call. None: always on its call (a session's command, whose
   * signal interrupts the session's shell).
   */
  signalByPid?: (pid: number, signal: number) => Promise<boolean>;
  /** Keeps the last `maxOutputBytes` of its output, not the first: output goes on to its readers (ExecRequest.keepOutput). */
  keepLastOutput?: boolean;
  /** Whether the kernel's OOM killer ended a process of its sandbox since this was last asked (asked only of a command killed by SIGKILL). */
  oomKilled?: () => Promise<boolean>;
  /** The sandbox's own limits it ran into (see watchLimits; asked only of a command that did not exit 0). */
  limitsHit?: (end: { oomKilled: boolean }) => Promise<LimitHit[]>;
}

/**
 * One running or finished command: its retained output (at most `maxOutputBytes`, counted over
 * stdout and stderr together), its exit, and its stdin. It runs on, and keeps collecting, whether
 * or not any client is reading it.
 */
export class Command {
  readonly id: string;
  /** When it started (a session's command that waited its turn: when the turn came). */
  startedAt = Date.now();
  private readonly out = new CommandOutput();
  private truncated = false;
  private exitEvent: ExitEvent | null = null;
  finishedAt: number | null = null;
  private released = false;
  /** Stdin writes go one after another: the last one queued, and the bytes of those not yet taken. */
  private stdinTail: Promise<void> = Promise.resolve();
  private stdinPending = 0;

  constructor(
    id: string,
    /** Its process id in the sandbox (a session's command: the session shell's). */
    readonly pid: number,
    /** What it runs, as listed (see CommandInfo), and whether it is on a terminal. */
    readonly what: Pick<CommandInfo, 'cmd' | 'cwd' | 'env' | 'tag' | 'pty'>,
    private call: CommandCall,
    private readonly maxOutputBytes: number,
    private readonly onActivity: () => void,
    o: CommandOptions = {},
  ) {
    this.id = id;
    this.budgets = o.budgets ?? [];
    this.stdinHold = o.stdin ?? null;
    this.stdinDeadlineMs = o.stdinDeadlineMs ?? STDIN_DEADLINE_MS;
    this.signalByPid = o.signalByPid ?? null;
    this.keepLast = o.keepLastOutput === true;
    this.oomKilled = o.oomKilled ?? null;
    this.limitsHit = o.limitsHit ?? null;
  }

  private readonly oomKilled: (() => Promise<boolean>) | null;
  private readonly limitsHit: CommandOptions['limitsHit'] | null;
  /** A kill was sent through the API (its end is then the request's doing). */
  private killRequested = false;

  private readonly keepLast: boolean;

  private readonly budgets: OutputBudget[];
  private readonly stdinHold: StdinHold | null;
  private readonly stdinDeadlineMs: number;
  private readonly signalByPid: CommandOptions['signalByPid'] | null;

  /** Reads the command's frames until it exits; never throws. */
  async pump(): Promise<void> {
    try {
      for (;;) {
        const f = await this.call.next();
        if (f === null) throw new WarrenError('unavailable', 'the sandbox went away while the command ran');
        if (f.type === REPLY.stdout || f.type === REPLY.stderr) this.output(f.type === REPLY.stdout ? 'stdout' : 'stderr', f.payload);
        else if (f.type === REPLY.done) {
          const x = decodeFields(f.payload);
          const code = x.get('c')?.[0];
          const sig = x.get('s')?.[0];
          const exitCode = code !== undefined && code !== '' ? Number(code) : null;
          const signal = sig ? (SIGNAL_NAMES.get(Number(sig)) ?? `SIG${sig}`) : null;
          const timedOut = x.get('T')?.[0] === '1';
          const durationMs = Date.now() - this.startedAt;
          const killedBy = await this.killer(exitCode, signal, timedOut);
          const limitsHit =
            exitCode === 0 || !this.limitsHit
              ? []
              : await this.limitsHit({ oomKilled: killedBy === 'oom' }).catch(() => (killedBy === 'oom' ? ['memory' as const] : []));
          this.finish({ type: 'exit', exitCode, signal, durationMs, timedOut, truncated: this.truncated, killedBy, limitsHit });
          return;
        } else if (f.type === REPLY.failed) throw failure(f);
      }
    } catch (e) {
      const err = e instanceof WarrenError ? e : new WarrenError('internal', 'command failed');
      this.finishedAt = Date.now();
      this.out.end({ type: 'error', error: { code: err.code, message: err.message } });
    } finally {
      this.call.close();
      this.call = ENDED_CALL;
    }
  }

  /**
   * Who ended it, when not itself: its timeout, a kill sent through the API, or the OOM killer
   * (a SIGKILL, or a shell's report of its child's, 137, with a new OOM kill in the sandbox).
   */
  private async killer(exitCode: number | null, signal: string | null, timedOut: boolean): Promise<ExitEvent['killedBy']> {
    if (timedOut) return 'timeout';
    if ((signal === 'SIGKILL' || exitCode === 137) && this.oomKilled && (await this.oomKilled().catch(() => false))) return 'oom';
    const bySignal = signal !== null || (exitCode !== null && exitCode > 128);
    return this.killRequested && bySignal ? 'request' : null;
  }

  private output(stream: OutputStream, data: Buffer): void {
    this.onActivity();
    if (this.keepLast) {
      this.outputKeepingLast(stream, data);
      return;
    }
    const room = this.maxOutputBytes - this.out.length;
    if (room <= 0) {
      this.truncated = true;
      return;
    }
    let kept = data.length > room ? data.subarray(0, room) : data;
    if (this.budgets.length) kept = kept.subarray(0, this.released ? 0 : takeFromAll(this.budgets, kept.length));
    if (kept.length < data.length) this.truncated = true;
    if (kept.length) this.out.add(stream, kept);
  }

  /** The oldest output makes room for the newest (its budget given back, then taken again for the newest). */
  private outputKeepingLast(stream: OutputStream, data: Buffer): void {
    let kept = data.length > this.maxOutputBytes ? data.subarray(data.length - this.maxOutputBytes) : data;
    const dropped = this.out.trimTo(this.maxOutputBytes - kept.length);
    if (dropped && !this.released) for (const b of this.budgets) b.give(dropped);
    if (this.budgets.length) kept = kept.subarray(0, this.released ? 0 : takeFromAll(this.budgets, kept.length));
    if (dropped || kept.length < data.length) this.truncated = true;
    if (kept.length) this.out.add(stream, kept);
  }

  private finish(ev: ExitEvent): void {
    this.exitEvent = ev;
    this.finishedAt = Date.now();
    this.out.end(ev);
  }

  get done(): boolean {
    return this.finishedAt !== null;
  }

  get exit(): ExitEvent | null {
    return this.exitEvent;
  }

  /**
   * Its events from byte `offset` of the combined output on, until the exit (or error): what is
   * retained in pieces, then what comes, each piece taken only when the reader asks (CommandOutput).
   * A reader that stops leaves the command running.
   */
  events(offset: number): AsyncIterable<ExecEvent> {
    return this.out.events(offset);
  }

  /** The whole retained output of one stream. */
  text(stream: OutputStream): string {
    return this.out.text(stream);
  }

  /** Resolves with the final event (exit or error). */
  wait(): Promise<ExecEvent> {
    return this.out.ended;
  }

  get retainedBytes(): number {
    return this.out.length;
  }

  /** Gives its output's bytes back to the node's budget: it is being forgotten. */
  release(): void {
    if (this.released) return;
    this.released = true;
    for (const b of this.budgets) b.give(this.out.length);
  }

  /**
   * Writes to its stdin; resolves once the sandbox has taken the bytes (its socket drained), so a
   * caller that writes faster than the command reads waits instead of growing the edge. Writes go
   * in order. resource_exhausted when MAX_PENDING_STDIN_BYTES already wait (or the node's budget
   * is spent), or when the sandbox does not take them within the deadline (what was sent by then
   * stays sent); conflict once the command has ended. `deadline: false`: no deadline (an exec's
   * own stdin, which nobody waits for); `reserved`: its bytes are already taken from the node's
   * budget (see reserveStdin).
   */
  writeStdin(data: Buffer, o: { deadline?: boolean; reserved?: boolean } = {}): Promise<void> {
    const n = data.length;
    const refuse = (e: WarrenError): Promise<void> => {
      if (o.reserved) this.stdinHold?.give(n);
      return Promise.reject(e);
    };
    if (this.done) return refuse(this.ended());
    if (this.stdinPending > 0 && this.stdinPending + n > MAX_PENDING_STDIN_BYTES)
      return refuse(
        new WarrenError('resource_exhausted', 'the command has as much stdin waiting as it may: it is not reading its stdin', {
          commandId: this.id,
          pendingStdinBytes: this.stdinPending,
          maxPendingStdinBytes: MAX_PENDING_STDIN_BYTES,
        }),
      );
    if (!o.reserved) {
      try {
        this.stdinHold?.take(n);
      } catch (e) {
        return Promise.reject(e instanceof Error ? e : new Error(String(e)));
      }
    }
    const until = o.deadline === false ? Infinity : Date.now() + this.stdinDeadlineMs;
    this.stdinPending += n;
    const turn = this.stdinTail.then(() => this.sendStdin(data, until));
    this.stdinTail = turn.catch(() => undefined);
    return turn.finally(() => {
      this.stdinPending -= n;
      this.stdinHold?.give(n);
    });
  }

  /** Ends its stdin (after the writes before it). */
  closeStdin(): Promise<void> {
    const turn = this.stdinTail.then(() => {
      if (!this.done && !this.call.closed) this.call.send(REQ.eof);
    });
    this.stdinTail = turn.catch(() => undefined);
    return turn;
  }

  private async sendStdin(data: Buffer, until: number): Promise<void> {
    for (let off = 0; off < data.length; off += STDIN_FRAME_BYTES) {
      // What was written before (an earlier write that timed out) is taken first.
      await this.taken(data.length, until);
      if (this.done || this.call.closed) throw this.ended();
      this.call.send(REQ.data, data.subarray(off, off + STDIN_FRAME_BYTES));
    }
    await this.taken(data.length, until);
  }

  /** Waits until the socket has taken what was written to it (see writeStdin). */
  private async taken(bytes: number, until: number): Promise<void> {
    const how = await this.call.drain(until === Infinity ? undefined : until - Date.now());
    if (how === 'closed') throw this.ended();
    if (how === 'timeout')
      throw new WarrenError(
        'resource_exhausted',
        `the sandbox did not take the command's stdin within ${this.stdinDeadlineMs} ms: it is not reading its stdin`,
        {
          commandId: this.id,
          stdinBytes: bytes,
        },
      );
  }

  private ended(): WarrenError {
    return new WarrenError('conflict', 'the command has ended', { commandId: this.id });
  }

  /** A terminal's new size; invalid_argument for a command not on one. */
  resize(size: TerminalSize): void {
    if (!this.what.pty) throw new WarrenError('invalid_argument', 'the command does not run on a terminal (start it with pty)', { commandId: this.id });
    if (!this.done) this.call.send(REQ.resize, Buffer.from(`${size.cols} ${size.rows}`));
  }

  /** How GET .../commands lists it. */
  info(): CommandInfo {
    return {
      commandId: this.id,
      pid: this.pid,
      ...this.what,
      startedAt: new Date(this.startedAt).toISOString(),
      finishedAt: this.finishedAt === null ? null : new Date(this.finishedAt).toISOString(),
      exitCode: this.exitEvent?.exitCode ?? null,
      signal: this.exitEvent?.signal ?? null,
    };
  }

  /**
   * Sends it a signal. Not on its own call where it can help it: what that carries waits behind the
   * stdin it sent, which a command that reads none never takes (a kill, a terminal's hang-up would
   * never arrive). A command that exited meanwhile is no error; an init that cannot signal by pid
   * (one older than that) gets the signal on the call.
   */
  async signal(name: string): Promise<void> {
    if (this.done) return;
    const n = constants.signals[name as keyof typeof constants.signals];
    if (n === undefined) throw new WarrenError('invalid_argument', `unknown signal ${name}`);
    // Only a signal that ends a process makes its end the request's (not SIGCONT, SIGWINCH, SIGUSR1…).
    if (TERMINATING.has(name)) this.killRequested = true;
    if (this.signalByPid && this.pid > 0) {
      try {
        if (await this.signalByPid(this.pid, n)) return;
      } catch (e) {
        if (this.done || (e instanceof WarrenError && e.code === 'not_found')) return;
      }
    }
    if (!this.done && !this.call.closed) this.call.send(REQ.signal, encodeFields([['s', String(n)]]));
  }
}
