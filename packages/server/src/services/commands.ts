import type { CommandInfo, ExecRequest, TerminalSize } from '@warren/api';
import { WarrenError } from '@warren/api';
import { newCommandId, type CommandResult, type CommandStream, type EdgeApi } from '@warren/edge';
import type { Store } from '../store/store.js';
import type { Caller, SandboxService } from './sandboxes.js';

export interface CommandServiceOptions {
  /** Named steps where a fault-injection test crashes the process (see WarrenOptions.crashAt). */
  failpoint?: (step: string) => void;
}

/** Commands and shell sessions in the caller's live sandboxes, on their edge. */
export class CommandService {
  /** Commands started through this replica, and those that could not be (an API error): for the metrics' history. */
  readonly counts = { started: 0, failed: 0 };
  /** Commands being started for a requestId (sandbox id, NUL, requestId): a concurrent retry waits for the same one. */
  private readonly starting = new Map<string, Promise<string>>();

  constructor(
    private readonly store: Store,
    private readonly sandboxes: SandboxService,
    private readonly o: CommandServiceOptions = {},
  ) {}

  /**
   * Starts a command, or finds the one an earlier request with the same requestId started, and
   * follows it (`wait`: answers at its end, with its output). The requestId and the command's id
   * are stored before the command starts (intent first): a retry after a crash or a restart,
   * when the command's output is gone, fails with conflict instead of running the command a
   * second time. A command that could not be started at all gives its requestId back.
   */
  exec(caller: Caller, id: string, req: ExecRequest, wait: true): Promise<CommandResult>;
  exec(caller: Caller, id: string, req: ExecRequest, wait: false): Promise<CommandStream>;
  async exec(caller: Caller, id: string, req: ExecRequest, wait: boolean): Promise<CommandResult | CommandStream> {
    try {
      const r = await this.execNow(caller, id, req, wait);
      this.counts.started++;
      return r;
    } catch (e) {
      this.counts.failed++;
      throw e;
    }
  }

  private async execNow(caller: Caller, id: string, req: ExecRequest, wait: boolean): Promise<CommandResult | CommandStream> {
    const rid = req.requestId;
    return this.sandboxes.on(caller, id, async (sid, edge) => {
      // Without a requestId: one call to the edge, which starts the command and follows it.
      if (rid === undefined) return wait ? edge.run(sid, req) : edge.exec(sid, req);
      const commandId = await this.startOnce(edge, sid, rid, req);
      return wait ? edge.result(sid, commandId) : edge.follow(sid, commandId, 0);
    });
  }

  /** Starts the command of a requestId once (see exec); answers its id. */
  private startOnce(edge: EdgeApi, sid: string, rid: string, req: ExecRequest): Promise<string> {
    const key = `${sid}\0${rid}`;
    const inFlight = this.starting.get(key);
    if (inFlight) return inFlight;
    // In the map before the first await: a second call with this requestId waits for this one
    // instead of finding the store's row for a command not started yet.
    const started = this.storeAndStart(edge, sid, rid, req);
    this.starting.set(key, started);
    return started.finally(() => this.starting.delete(key));
  }

  private async storeAndStart(edge: EdgeApi, sid: string, rid: string, req: ExecRequest): Promise<string> {
    const commandId = newCommandId();
    if (!(await this.store.putExecRequest(sid, rid, commandId))) {
      const prev = (await this.store.execRequest(sid, rid)) ?? '';
      if (await edge.hasCommand(sid, prev)) return prev;
      throw new WarrenError('conflict', `requestId "${rid}" already ran as ${prev}, whose output is no longer kept`, { requestId: rid, commandId: prev });
    }
    this.o.failpoint?.('exec:stored');
    try {
      const cid = await edge.start(sid, req, commandId);
      this.o.failpoint?.('exec:started');
      return cid;
    } catch (e) {
      await this.store.deleteExecRequest(sid, rid);
      throw e;
    }
  }

  /** A command's events from byte `offset` of its combined output. */
  follow(caller: Caller, id: string, commandId: string, offset: number): Promise<CommandStream> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.follow(sid, commandId, offset));
  }

  signal(caller: Caller, id: string, commandId: string, signal: string): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.signal(sid, commandId, signal));
  }

  resize(caller: Caller, id: string, commandId: string, size: TerminalSize): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.resize(sid, commandId, size));
  }

  /** The commands the sandbox runs now (`finished`: and the newest finished ones its node keeps). */
  list(caller: Caller, id: string, finished = false): Promise<CommandInfo[]> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.commands(sid, finished ? { finished } : undefined));
  }

  stdin(caller: Caller, id: string, commandId: string, data: Buffer, eof: boolean): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.stdin(sid, commandId, data, eof));
  }

  createSession(caller: Caller, id: string, p: { cwd?: string; env?: Record<string, string>; user?: string }): Promise<string> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.createSession(sid, p));
  }

  deleteSession(caller: Caller, id: string, sessionId: string): Promise<void> {
    return this.sandboxes.on(caller, id, (sid, edge) => edge.deleteSession(sid, sessionId));
  }
}
