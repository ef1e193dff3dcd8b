import { totalmem } from 'node:os';
import type { ExecRequest } from '@warren/api';
import { DEFAULTS, MAX_FINISHED_COMMANDS_LISTED, WarrenError, randomText } from '@warren/api';
import * as ch from '../init/channel.js';
import { SHELL } from '../init/platform.js';
import { Command, type CommandCall } from './command.js';
import { watchLimits } from './limit-watch.js';
import { forgetCommand, makeRoom, markActivity, parseSessionId, type Live } from './live.js';
import { OutputBudget } from './output-budget.js';
import { SessionLine } from './session-queue.js';
import { StdinBudgets, defaultStdinBudget, type StdinHold } from './stdin-budget.js';
import { argvToScript, envList } from './shell.js';

const DEFAULT_EXEC_TIMEOUT_MS = DEFAULTS.exec.timeoutMs;
const DEFAULT_MAX_OUTPUT = DEFAULTS.exec.maxOutputBytes;
const RETAINED_PER_SANDBOX = 64 * 1024 * 1024;
/**
 * The most finished commands a sandbox keeps, whatever their age: each holds ~2 KB of its own
 * even with no output, and a caller running thousands of short commands a minute would otherwise
 * grow the node's memory for the whole retention.
 */
export const FINISHED_KEPT_PER_SANDBOX = 1024;

/** What a new command holds its output and its waiting stdin in (see OutputBudgets). */
export interface CommandBudgets {
  output: OutputBudget[];
  stdin: StdinHold;
}

/**
 * The node's budget for command output it holds, and each tenant's share of it (half, so that
 * one tenant never holds it all); and the same for stdin waiting for its sandboxes (StdinBudgets).
 */
export class OutputBudgets {
  private readonly node: OutputBudget;
  private readonly shares = new Map<string, OutputBudget>();
  private readonly stdin: StdinBudgets;

  constructor(totalBytes: number, stdinBytes = defaultStdinBudget(totalmem())) {
    this.node = new OutputBudget(totalBytes);
    this.stdin = new StdinBudgets(stdinBytes);
  }

  /**
   * The budgets a new command of `l` holds its output in, once there is room in each (finished
   * commands go, oldest first); resource_exhausted while running ones hold it all.
   */
  forCommand(l: Live, lives: () => Iterable<Live>): CommandBudgets {
    const tenant = l.spec.tenant;
    let share: OutputBudget | undefined;
    if (tenant !== undefined) {
      share = this.shares.get(tenant);
      if (!share) this.shares.set(tenant, (share = new OutputBudget(Math.floor(this.node.totalBytes / 2))));
      if (
        share.spent &&
        !makeRoom(
          share,
          [...lives()].filter((x) => x.spec.tenant === tenant),
        )
      )
        throw new WarrenError('resource_exhausted', "this tenant's commands hold as much output as one tenant may on this node; read or end them first", {
          retainedOutputBytes: share.used,
          maxRetainedOutputBytes: share.totalBytes,
        });
    }
    if (this.node.spent && !makeRoom(this.node, lives()))
      throw new WarrenError('resource_exhausted', 'this node holds as much command output as it may; read or end running commands first', {
        retainedOutputBytes: this.node.used,
        maxRetainedOutputBytes: this.node.totalBytes,
      });
    return { output: share ? [this.node, share] : [this.node], stdin: this.stdin.forTenant(tenant) };
  }
}

/**
 * Drops a sandbox's finished commands past retention, and the oldest ones past its output budget
 * or past FINISHED_KEPT_PER_SANDBOX of them.
 */
export function pruneCommands(l: Live, now: number, keepMs: number): void {
  l.prunedAt = now;
  let total = 0;
  let finished = 0;
  for (const c of l.commands.values()) {
    total += c.retainedBytes;
    if (c.done) finished++;
  }
  // Oldest first: a Map keeps the order commands were started in.
  for (const [cid, c] of l.commands) {
    if (!c.done) continue;
    if (now - (c.finishedAt ?? now) > keepMs || total > RETAINED_PER_SANDBOX || finished > FINISHED_KEPT_PER_SANDBOX) {
      total -= c.retainedBytes;
      finished--;
      forgetCommand(l, cid);
    }
  }
}

/**
 * The commands GET .../commands lists, in the order they started: the running ones, and with
 * `finished` the newest MAX_FINISHED_COMMANDS_LISTED finished (by their end); not a session's.
 */
export function listedCommands<C extends Pick<Command, 'done' | 'pid' | 'finishedAt'>>(all: Iterable<C>, finished: boolean): C[] {
  const own = [...all].filter((c) => c.pid > 0);
  if (!finished) return own.filter((c) => !c.done);
  const ended = own.filter((c) => c.done).sort((a, b) => (b.finishedAt ?? 0) - (a.finishedAt ?? 0));
  const shown = new Set(ended.slice(0, MAX_FINISHED_COMMANDS_LISTED));
  return own.filter((c) => !c.done || shown.has(c));
}

/** Whether a sandbox's commands are due a prune before another starts: once a second, or at once past the count kept (by a quarter). */
export const pruneDue = (l: Live, now: number): boolean => now - l.prunedAt >= 1000 || l.commands.size > FINISHED_KEPT_PER_SANDBOX * 1.25;

/**
 * Starts a command in the sandbox (in a session, or on its own) and keeps it under `cmdId`. A
 * command for a busy session is kept at once and waits its turn there (`ready` is awaited before
 * it starts: the sandbox may have been paused meanwhile); its timeout counts from its start.
 */
export async function launchCommand(
  l: Live,
  req: ExecRequest,
  cmdId: string,
  budgets: CommandBudgets,
  now: () => number = Date.now,
  ready: () => Promise<unknown> = async () => undefined,
): Promise<Command> {
  // The exec's own stdin is held from the start: taken from the node's budget before the command
  // starts (resource_exhausted then, rather than stdin dropped after).
  const stdin = !req.session && req.stdin !== undefined ? Buffer.from(req.stdin) : null;
  if (stdin) budgets.stdin.take(stdin.length);
  try {
    return await launch(l, req, cmdId, budgets, stdin, now, ready);
  } catch (e) {
    if (stdin) budgets.stdin.give(stdin.length);
    throw e;
  }
}

async function launch(
  l: Live,
  req: ExecRequest,
  cmdId: string,
  budgets: CommandBudgets,
  stdin: Buffer | null,
  now: () => number,
  ready: () => Promise<unknown>,
): Promise<Command> {
  const sock = l.sb.connect;
  const timeoutMs = req.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  // What it ran into of its sandbox's limits, read at its end only if it failed.
  const limitsHit = watchLimits(l);
  let call: CommandCall;
  let pid = 0;
  // The command a session's turn restarts the clock of (made below, once its call is there).
  const made: { cmd?: Command } = {};
  if (req.session) {
    if (req.pty) throw new WarrenError('invalid_argument', 'a command in a session cannot have a terminal of its own');
    if (req.stdin !== undefined || req.user !== undefined)
      throw new WarrenError('invalid_argument', 'stdin and user cannot be set for a command in a session (the session has its own)');
    const script = typeof req.cmd === 'string' ? req.cmd : argvToScript(req.cmd);
    const session = parseSessionId(req.session);
    const p = { session, script, env: envList(req.env), cwd: req.cwd, timeoutMs };
    call = await sessionLine(l, session, ready).take(
      () => ch.runInSession(sock, p),
      () => {
        if (made.cmd) made.cmd.startedAt = Date.now();
      },
    );
  } else {
    const argv = typeof req.cmd === 'string' ? [SHELL, '-c', req.cmd] : req.cmd;
    ({ call, pid } = await ch.startCommand(sock, {
      argv,
      cwd: req.cwd ?? l.spec.workdir ?? undefined,
      env: envList(l.spec.env, req.env),
      user: req.user ?? l.spec.user ?? undefined,
      stdin: req.stdin !== undefined || req.keepStdinOpen === true || req.pty !== undefined,
      timeoutMs,
      pty: req.pty,
    }));
  }
  const what = { cmd: req.cmd, cwd: req.cwd ?? null, env: req.env ?? {}, tag: req.tag ?? null, pty: req.pty !== undefined };
  const cmd = (made.cmd = new Command(cmdId, pid, what, call, req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT, () => markActivity(l, now()), {
    budgets: budgets.output,
    stdin: budgets.stdin,
    // A paused sandbox's init answers nothing until it resumes: its signal waits on the call.
    keepLastOutput: req.keepOutput === 'last' || (req.pty !== undefined && req.keepOutput !== 'first'),
    signalByPid: req.session ? undefined : async (p, n) => !l.spec.paused && (await ch.signalCommand(sock, p, n), true),
    oomKilled: async () => {
      const n = (await l.backend.oomKills?.(l.spec.id)) ?? null;
      if (n === null || n <= l.oomKillsSeen) return false;
      l.oomKillsSeen = n;
      return true;
    },
    limitsHit,
  }));
  l.commands.set(cmdId, cmd);
  if (req.requestId) {
    l.requestIds.set(req.requestId, cmdId);
    l.requestIdOf.set(cmdId, req.requestId);
  }
  if (stdin) {
    // Nobody waits for it: it goes in as the command reads it, however long that takes (it is
    // bounded by the request), and a command that ends first drops the rest.
    cmd.writeStdin(stdin, { deadline: false, reserved: true }).catch(() => undefined);
    if (!req.keepStdinOpen) cmd.closeStdin().catch(() => undefined);
  }
  void cmd.pump();
  return cmd;
}

/** Starts a shell session (the platform's bash, interactive, no profile) with the sandbox's env, user and workdir unless given. */
export async function openSession(l: Live, p: { cwd?: string; env?: Record<string, string>; user?: string }): Promise<string> {
  const initId = await ch.newSession(l.sb.connect, {
    argv: [SHELL, '--noprofile', '--norc', '-i'],
    cwd: p.cwd ?? l.spec.workdir ?? undefined,
    env: envList({ TERM: 'dumb' }, l.spec.env, p.env),
    user: p.user ?? l.spec.user ?? undefined,
  });
  return `ss_${initId}_${randomText(6, 'hex')}`;
}

/** The line of a session's commands, made when a command comes for a session that has none. */
function sessionLine(l: Live, session: string, ready: () => Promise<unknown>): SessionLine {
  let line = l.sessions.get(session);
  if (!line) {
    const made = new SessionLine(() => {
      if (l.sessions.get(session) === made) l.sessions.delete(session);
    }, ready);
    l.sessions.set(session, (line = made));
  }
  return line;
}

/** Ends a shell session (its processes are killed); the commands waiting their turn in it end with not_found. */
export async function closeSession(l: Live, sessionId: string): Promise<void> {
  const session = parseSessionId(sessionId);
  l.sessions.get(session)?.endWaiting(new WarrenError('not_found', 'the session was ended before the command ran', { sessionId }));
  await ch.endSession(l.sb.connect, session);
}

/** Ends the commands waiting their turn in a sandbox's sessions: the sandbox is going away. */
export function endSessionLines(l: Live): void {
  for (const line of [...l.sessions.values()]) line.endWaiting(new WarrenError('not_found', 'the sandbox ended before the command ran'));
}
