import { StringDecoder } from 'node:string_decoder';
import { constants } from 'node:os';
import type { CommandInfo, ExecEvent, ExitEvent, TerminalSize } from '@warren/api';
import { WarrenError } from '@warren/api';
import type { InitCall } from '../init/call.js';
import { REPLY, REQ, decodeFields, encodeFields } from '../init/frame.js';
import { failure } from '../init/call.js';
import { takeFromAll, type OutputBudget } from './output-budget.js';

export type OutputStream = 'stdout' | 'stderr';
interface Chunk {
  stream: OutputStream;
  data: Buffer;
}

export type CommandListener = (ev: ExecEvent) => void;

/** What a command's frames come through: its init call (a session's command: its turn, see SessionLine). */
export type CommandCall = Pick<InitCall, 'next' | 'send' | 'close' | 'drain'>;

const SIGNAL_NAMES = new Map<number, string>(Object.entries(constants.signals).map(([name, n]) => [n, name]));

/**
 * One running or finished command: its retained output (at most `maxOutputBytes`, counted over
 * stdout and stderr together), its exit, and the listeners streaming it. It runs on, and keeps
 * collecting, whether or not any client is listening.
 */
export class Command {
  readonly id: string;
  /** When it started (a session's command that waited its turn: when the turn came). */
  startedAt = Date.now();
  private readonly chunks: Chunk[] = [];
  private retained = 0;
  private truncated = false;
  private exitEvent: ExitEvent | null = null;
  private errorEvent: ExecEvent | null = null;
  private readonly listeners = new Set<CommandListener>();
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  finishedAt: number | null = null;
  private released = false;

  constructor(
    id: string,
    /** Its process id in the sandbox (a session's command: the session shell's). */
    readonly pid: number,
    /** What it runs, as listed (see CommandInfo), and whether it is on a terminal. */
    readonly what: Pick<CommandInfo, 'cmd' | 'cwd' | 'env' | 'tag' | 'pty'>,
    private readonly call: CommandCall,
    private readonly maxOutputBytes: number,
    private readonly onActivity: () => void,
    /** Budgets its output is held in (the node's, its tenant's share; see OutputBudget); none: only `maxOutputBytes` bounds it. */
    private readonly budgets: OutputBudget[] = [],
  ) {
    this.id = id;
  }

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
          this.finish({
            type: 'exit',
            exitCode: code !== undefined && code !== '' ? Number(code) : null,
            signal: sig ? (SIGNAL_NAMES.get(Number(sig)) ?? `SIG${sig}`) : null,
            durationMs: Date.now() - this.startedAt,
            timedOut: x.get('T')?.[0] === '1',
            truncated: this.truncated,
          });
          return;
        } else if (f.type === REPLY.failed) throw failure(f);
      }
    } catch (e) {
      const err = e instanceof WarrenError ? e : new WarrenError('internal', 'command failed');
      this.errorEvent = { type: 'error', error: { code: err.code, message: err.message } };
      this.finishedAt = Date.now();
      for (const l of this.listeners) l(this.errorEvent);
      this.listeners.clear();
    } finally {
      this.call.close();
    }
  }

  private output(stream: OutputStream, data: Buffer): void {
    this.onActivity();
    const room = this.maxOutputBytes - this.retained;
    if (room <= 0) {
      this.truncated = true;
      return;
    }
    let kept = data.length > room ? data.subarray(0, room) : data;
    if (this.budgets.length) kept = kept.subarray(0, this.released ? 0 : takeFromAll(this.budgets, kept.length));
    if (kept.length < data.length) this.truncated = true;
    if (kept.length === 0) return;
    this.chunks.push({ stream, data: kept });
    this.retained += kept.length;
    if (this.listeners.size) {
      const text = this.decoders[stream].write(kept);
      if (text) for (const l of this.listeners) l({ type: stream, data: text });
    }
  }

  private finish(ev: ExitEvent): void {
    this.exitEvent = ev;
    this.finishedAt = Date.now();
    for (const s of ['stdout', 'stderr'] as const) {
      const rest = this.decoders[s].end();
      if (rest) for (const l of this.listeners) l({ type: s, data: rest });
    }
    for (const l of this.listeners) l(ev);
    this.listeners.clear();
  }

  get done(): boolean {
    return this.finishedAt !== null;
  }

  get exit(): ExitEvent | null {
    return this.exitEvent;
  }

  /**
   * Replays output from byte `offset` of the combined output, then follows live events until the
   * exit. Returns a function that stops following.
   */
  follow(offset: number, listener: CommandListener): () => void {
    let pos = 0;
    const pending: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [] };
    for (const c of this.chunks) {
      const end = pos + c.data.length;
      if (end > offset) pending[c.stream].push(offset > pos ? c.data.subarray(offset - pos) : c.data);
      pos = end;
    }
    for (const s of ['stdout', 'stderr'] as const) {
      if (pending[s].length) listener({ type: s, data: Buffer.concat(pending[s]).toString('utf8') });
    }
    const final = this.exitEvent ?? this.errorEvent;
    if (final) {
      listener(final);
      return () => undefined;
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The whole retained output of one stream. */
  text(stream: OutputStream): string {
    return Buffer.concat(this.chunks.filter((c) => c.stream === stream).map((c) => c.data)).toString('utf8');
  }

  /** Resolves with the final event (exit or error). */
  wait(): Promise<ExecEvent> {
    const final = this.exitEvent ?? this.errorEvent;
    if (final) return Promise.resolve(final);
    return new Promise((resolve) => {
      const l: CommandListener = (ev) => {
        if (ev.type === 'exit' || ev.type === 'error') {
          this.listeners.delete(l);
          resolve(ev);
        }
      };
      this.listeners.add(l);
    });
  }

  get retainedBytes(): number {
    return this.retained;
  }

  /** Gives its output's bytes back to the node's budget: it is being forgotten. */
  release(): void {
    if (this.released) return;
    this.released = true;
    for (const b of this.budgets) b.give(this.retained);
  }

  writeStdin(data: Buffer): void {
    if (this.done) throw new WarrenError('conflict', 'the command has ended', { commandId: this.id });
    for (let off = 0; off < data.length; off += 1024 * 1024) this.call.send(REQ.data, data.subarray(off, off + 1024 * 1024));
  }

  closeStdin(): void {
    if (!this.done) this.call.send(REQ.eof);
  }

  /** A terminal's new size; invalid_argument for a command not on one. */
  resize(size: TerminalSize): void {
    if (!this.what.pty) throw new WarrenError('invalid_argument', 'the command does not run on a terminal (start it with pty)', { commandId: this.id });
    if (!this.done) this.call.send(REQ.resize, Buffer.from(`${size.cols} ${size.rows}`));
  }

  /** How GET .../commands lists it. */
  info(): CommandInfo {
    return { commandId: this.id, pid: this.pid, ...this.what, startedAt: new Date(this.startedAt).toISOString() };
  }

  signal(name: string): void {
    if (this.done) return;
    const n = constants.signals[name as keyof typeof constants.signals];
    if (n === undefined) throw new WarrenError('invalid_argument', `unknown signal ${name}`);
    this.call.send(REQ.signal, encodeFields([['s', String(n)]]));
  }
}
