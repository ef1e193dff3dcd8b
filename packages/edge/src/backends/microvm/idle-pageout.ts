import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { processCpuSeconds } from '../../host/proc.js';
import { qemuMemory } from './vm-memory.js';

const run = promisify(execFile);

/** When an idle microVM's QEMU is paged out (see idleStep). */
export interface IdlePolicy {
  /** Idle this long (its QEMU under `busyCpuFraction` of a CPU all along) before a page-out. */
  idleMs: number;
  /** A QEMU that used more than this share of one CPU since the last look is busy. */
  busyCpuFraction: number;
  /** Paged out already and idle still: paged out again once its anonymous memory grew back by this much. */
  regrowBytes: number;
}

/** The defaults: 30 s idle, 10 % of a CPU (an idle guest's timer ticks under TCG take 1 to 3 %), 4 MiB grown back. */
export const IDLE_POLICY: IdlePolicy = { idleMs: 30_000, busyCpuFraction: 0.1, regrowBytes: 4 * 2 ** 20 };

/** What the pager remembers of one QEMU between looks. */
export interface IdleState {
  /** At the last look: when (ms) and its CPU time then (s). */
  atMs: number;
  cpuSeconds: number;
  /** Idle since (ms). */
  idleSinceMs: number;
  /** Its anonymous memory after its last page-out in this idle spell; null: not paged out in it. */
  pagedAnonBytes: number | null;
}

/**
 * One look at a QEMU (pure): its state after it, and whether to page it out now. Busy (more CPU
 * than the policy's share since the last look) starts its idle spell again; idle for `idleMs`,
 * it is paged out once, and again whenever its anonymous memory grew back by `regrowBytes`.
 */
export function idleStep(
  prev: IdleState | undefined,
  now: { atMs: number; cpuSeconds: number; anonBytes: number },
  p: IdlePolicy,
): { state: IdleState; pageOut: boolean } {
  if (!prev) return { state: { atMs: now.atMs, cpuSeconds: now.cpuSeconds, idleSinceMs: now.atMs, pagedAnonBytes: null }, pageOut: false };
  const wallSeconds = Math.max(0.001, (now.atMs - prev.atMs) / 1000);
  const busy = (now.cpuSeconds - prev.cpuSeconds) / wallSeconds > p.busyCpuFraction;
  const state: IdleState = {
    atMs: now.atMs,
    cpuSeconds: now.cpuSeconds,
    idleSinceMs: busy ? now.atMs : prev.idleSinceMs,
    pagedAnonBytes: busy ? null : prev.pagedAnonBytes,
  };
  const idleLong = !busy && now.atMs - state.idleSinceMs >= p.idleMs;
  const pageOut = idleLong && (state.pagedAnonBytes === null || now.anonBytes - state.pagedAnonBytes >= p.regrowBytes);
  return { state, pageOut };
}

/** The pager's options. */
export interface IdlePagerOptions {
  /** native/build/warren-pageout (process_madvise MADV_PAGEOUT of a process's anonymous memory). */
  pageoutPath: string;
  /** How often it looks (ms; default 5,000). */
  intervalMs?: number;
  policy?: IdlePolicy;
  /** The QEMUs to look at now, by sandbox id. */
  running: () => Array<{ id: string; pid: number }>;
  /**
   * Asks a guest to give its caches back before its page-out (AgentMux.reclaim: what it frees is
   * zero and swaps for nothing); whether it answered. Absent: QEMUs are paged out as they are.
   */
  reclaim?: (id: string) => Promise<boolean>;
  /** The clock (ms). */
  now?: () => number;
}

/**
 * Gives an idle microVM's memory back to the host from outside its guest, which is trusted with
 * nothing: once its QEMU has been idle a while (IDLE_POLICY), the guest is asked to drop its
 * caches (its freed pages zero: they swap for nothing), then its anonymous memory (the guest's
 * pages written since its clone, TCG's translated code, QEMU's heap) is paged out to the node's
 * swap (zram: its compressed size stays, and a sandbox's accounting counts it, see VmMemory).
 * What the guest touches again comes back on its own; a guest that keeps busy keeps its memory,
 * within the RAM it was given.
 */
export class IdlePager {
  private readonly states = new Map<string, IdleState>();
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  /** Page-outs done so far, and of them those whose guest gave its caches back first (for tests and logs). */
  pageOuts = 0;
  reclaims = 0;

  constructor(private readonly o: IdlePagerOptions) {}

  /** Looks every `intervalMs` until stop. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.tick().catch(() => undefined), this.o.intervalMs ?? 5000);
    this.timer.unref();
  }

  /** Stops looking, after a look under way. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.ticking;
  }

  /** One look at every running QEMU, paging out those idle long enough, one at a time. */
  tick(): Promise<void> {
    this.ticking ??= this.look().finally(() => (this.ticking = null));
    return this.ticking;
  }

  private async look(): Promise<void> {
    const running = this.o.running();
    const ids = new Set(running.map((r) => r.id));
    for (const id of this.states.keys()) if (!ids.has(id)) this.states.delete(id);
    const policy = this.o.policy ?? IDLE_POLICY;
    for (const { id, pid } of running) {
      const cpuSeconds = await processCpuSeconds(pid);
      const mem = await qemuMemory(pid, 0);
      if (cpuSeconds === null || !mem) continue;
      const step = idleStep(this.states.get(id), { atMs: (this.o.now ?? Date.now)(), cpuSeconds, anonBytes: mem.anonBytes }, policy);
      if (step.pageOut) {
        if (await this.o.reclaim?.(id).catch(() => false)) this.reclaims++;
        await run(this.o.pageoutPath, ['--private-files', String(pid)]).catch(() => undefined);
        this.pageOuts++;
        step.state.pagedAnonBytes = (await qemuMemory(pid, 0))?.anonBytes ?? 0;
      }
      this.states.set(id, step.state);
    }
  }
}
