import { WarrenError, randomText } from '@warren/api';
import type { Backend, BackendSandbox, LimitCounts, SandboxStats } from '../backends/backend.js';
import type { Command } from './command.js';
import type { OutputBudget } from './output-budget.js';
import type { SessionLine } from './session-queue.js';
import type { EdgeSandboxSpec } from './edge-spec.js';

/** What the edge holds of one running sandbox: its spec, its backend handle, commands, pause state. */
export interface Live {
  spec: EdgeSandboxSpec;
  sb: BackendSandbox;
  /** The backend that runs it. */
  backend: Backend;
  commands: Map<string, Command>;
  /** requestId → commandId, and back (to forget both together). */
  requestIds: Map<string, string>;
  requestIdOf: Map<string, string>;
  /** Commands being started for a requestId, so a concurrent retry waits for the same one. */
  pendingRequests: Map<string, Promise<Command>>;
  prunedAt: number;
  /** Shell sessions with a command running or waiting, by the init's session number. */
  sessions: Map<string, SessionLine>;
  resuming: Promise<void> | null;
  pausing: Promise<void> | null;
  /** The page-out that follows a pause, in the background until it ends or a resume stops it. */
  reclaim: { abort: () => void; done: Promise<void> } | null;
  /** When it was paused, and what stayed resident after reclaim (what admission counts then). */
  pausedAtMs: number | null;
  residentWhilePaused: number;
  /** When memory pressure last paged it out where it ran (null: never): it is not again until it has been active since. */
  pagedOutAtMs: number | null;
  /** The last CPU sample: when, total seconds then, and the rate since the one before (cores). */
  cpuSample: { atMs: number; seconds: number; rate: number } | null;
  /** Its activity time moved since a control plane last asked for the ones that did (EdgeApi.sandboxes `touched`). */
  touched: boolean;
  /** The OOM kills in it already told of (a command's end is the OOM killer's when there are more). */
  oomKillsSeen: number;
  /** Its limit counters as a failed command's end last read them (null: none yet; see watchLimits). */
  limitsSeen: LimitCounts | null;
  /** Its backend tells when its init ends (Backend.watchExit): the sweep does not look at it. */
  watched: boolean;
  /**
   * Its init was seen to end (the backend told): its owner is told again at every liveness check
   * while it is still here, as a report that could not be recorded (a control plane without its
   * database) must not be lost.
   */
  endSeen: boolean;
}

/** Records activity on a sandbox now (for idle timeouts, and for the control plane to write back). */
export function markActivity(l: Live, now: number): void {
  l.spec.lastActivityMs = now;
  l.touched = true;
}

export function newLive(spec: EdgeSandboxSpec, sb: BackendSandbox, backend: Backend, now: number = Date.now()): Live {
  return {
    spec,
    sb,
    backend,
    commands: new Map(),
    requestIds: new Map(),
    requestIdOf: new Map(),
    pendingRequests: new Map(),
    prunedAt: 0,
    sessions: new Map(),
    resuming: null,
    pausing: null,
    reclaim: null,
    pausedAtMs: spec.paused ? now : null,
    residentWhilePaused: 0,
    pagedOutAtMs: null,
    cpuSample: null,
    touched: false,
    oomKillsSeen: 0,
    limitsSeen: null,
    watched: false,
    endSeen: false,
  };
}

/** Forgets one of a sandbox's commands (and its requestId), giving its output back to the budget. */
export function forgetCommand(l: Live, commandId: string): void {
  l.commands.get(commandId)?.release();
  l.commands.delete(commandId);
  const rid = l.requestIdOf.get(commandId);
  if (rid !== undefined) {
    l.requestIds.delete(rid);
    l.requestIdOf.delete(commandId);
  }
}

/**
 * Forgets finished commands, the oldest first, whichever sandbox holds them, until the node's
 * output budget has room again; false when running commands hold all of it.
 */
export function makeRoom(budget: OutputBudget, lives: Iterable<Live>): boolean {
  const done = [...lives].flatMap((l) => [...l.commands].filter(([, c]) => c.done).map(([cid, c]) => ({ l, cid, at: c.finishedAt ?? 0 })));
  for (const d of done.sort((a, b) => a.at - b.at)) {
    if (!budget.spent) break;
    forgetCommand(d.l, d.cid);
  }
  return !budget.spent;
}

/** A new command id (`cmd_` and 12 random base64url characters). */
export function newCommandId(): string {
  return `cmd_${randomText(9, 'base64url')}`;
}

/** The init's own session number inside an API session id (`ss_<n>_<random>`). */
export function parseSessionId(sessionId: string): string {
  const m = /^ss_(\d{1,9})_[0-9a-f]{12}$/.exec(sessionId);
  if (!m?.[1]) throw new WarrenError('not_found', 'no such session', { sessionId });
  return m[1];
}

/**
 * Why a sandbox's init is gone: the kernel's OOM killer at the sandbox's own limit (a kill there
 * that no command's end was told of), or otherwise an exit.
 */
export async function endCause(l: Live): Promise<{ reason: 'exited' | 'oom'; detail: string }> {
  const kills = (await l.backend.oomKills?.(l.spec.id).catch(() => null)) ?? null;
  if (kills !== null && kills > l.oomKillsSeen)
    return { reason: 'oom', detail: `out of memory: the kernel killed its processes at its limit (${l.spec.resources.memoryMiB} MiB)` };
  return { reason: 'exited', detail: 'its init exited or was killed' };
}

/**
 * A sandbox's stats with its recent CPU (cores used since the previous sample a second or more
 * ago, which this one replaces then) and idle time, at `now`.
 */
export function sampledStats(l: Live, st: SandboxStats, now: number): SandboxStats & { cpuRecent: number; idleSeconds: number } {
  const prev = l.cpuSample;
  if (!prev) l.cpuSample = { atMs: now, seconds: st.cpuSeconds, rate: 0 };
  else if (now - prev.atMs >= 1000)
    l.cpuSample = { atMs: now, seconds: st.cpuSeconds, rate: Math.max(0, (st.cpuSeconds - prev.seconds) / ((now - prev.atMs) / 1000)) };
  return { ...st, cpuRecent: l.spec.paused ? 0 : (l.cpuSample?.rate ?? 0), idleSeconds: Math.max(0, (now - l.spec.lastActivityMs) / 1000) };
}
