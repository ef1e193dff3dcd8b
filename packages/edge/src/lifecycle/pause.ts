import { memoryRequestOf } from '@warren/api';
import type { EdgeEvents } from './events.js';
import type { Live } from './live.js';
import { startReclaim, stopReclaim } from './reclaim.js';
import type { Semaphore } from '../util/semaphore.js';

/** What pausing and resuming a sandbox needs of its edge. */
export interface PauseContext {
  now(): number;
  events: EdgeEvents;
  logger?: { warn(msg: string, meta?: unknown): void };
  /** Bounds the page-outs of mass pauses (a lease's lapse) under way at once: each is a process that walks a sandbox's memory. */
  pageouts?: Semaphore;
  /** Told after a sandbox's pause, page-out or resume changed what admission counts of it (PausedLedger). */
  changed?(id: string): void;
}

/**
 * Freezes a sandbox and answers; its memory is reclaimed in the background (page cache
 * dropped, anonymous memory to swap when the node has swap), so a pause takes as long as a
 * freeze whatever the sandbox holds. Its processes, sessions, open files and writable layer
 * stay as they are. A resume during the page-out stops it; pauses at once are one pause.
 */
export async function pauseLive(l: Live, id: string, c: PauseContext, o: { reclaim?: boolean; gated?: boolean; reason?: 'memory' } = {}): Promise<void> {
  if (l.resuming) await l.resuming;
  if (l.spec.paused) return;
  l.pausing ??= (async () => {
    await l.backend.pause(id);
    // Its init is frozen: no connection to it is kept while it is (nor memory for one in it).
    l.sb.connect.kept?.close();
    l.spec.paused = true;
    l.pausedAtMs = c.now();
    // Not paged out (it is about to go): admission counts all it asked for as still held.
    if (o.reclaim === false) l.residentWhilePaused = memoryRequestOf(l.spec.resources) * 2 ** 20;
    else startReclaim(l.backend, id, l, { logger: c.logger, gate: o.gated ? c.pageouts : undefined, settled: () => c.changed?.(id) });
    c.events.emit({ type: 'state', id, paused: true, expiresAtMs: l.spec.expiresAtMs, ...(o.reason ? { reason: o.reason } : {}) });
  })().finally(() => {
    l.pausing = null;
    c.changed?.(id);
  });
  await l.pausing;
}

/**
 * Thaws a paused sandbox (after a pause under way, and stopping its page-out first); resumes at
 * once are one resume. Time paused does not count against the TTL unless the sandbox asked for it.
 */
export async function resumeLive(l: Live, id: string, c: PauseContext): Promise<void> {
  if (l.pausing) await l.pausing.catch(() => undefined);
  if (!l.spec.paused) return;
  l.resuming ??= stopReclaim(l)
    .then(() => l.backend.resume(id))
    .then(
      () => {
        l.sb.connect.kept?.reopen();
        l.spec.paused = false;
        l.resuming = null;
        c.changed?.(id);
        if (l.pausedAtMs !== null && l.spec.expiresAtMs !== null && !l.spec.ttlCountsPaused) l.spec.expiresAtMs += c.now() - l.pausedAtMs;
        l.pausedAtMs = null;
        c.events.emit({ type: 'state', id, paused: false, expiresAtMs: l.spec.expiresAtMs });
      },
      (e: unknown) => {
        l.resuming = null;
        c.changed?.(id);
        throw e;
      },
    );
  await l.resuming;
}

/**
 * Short freezes of sandboxes for a consistent view of their files (a commit), one at a time per
 * sandbox: a second must not thaw it under the first. A sandbox paused by its owner stays paused.
 */
export class Freezes {
  private readonly running = new Map<string, Promise<void>>();

  /**
   * Settles once no freeze of the sandbox is under way: what a resume waits for, so nothing of
   * the sandbox runs while its files are read (a process that swaps a directory for a symlink
   * mid-copy would have the copy read the host's files).
   */
  idle(id: string): Promise<void> {
    return this.running.get(id) ?? Promise.resolve();
  }

  /** Runs `fn` with the sandbox frozen, then thaws it unless it was paused or is gone (`live` false). */
  run<T>(id: string, get: () => Live, live: () => boolean, fn: () => Promise<T>): Promise<T> {
    const prev = this.running.get(id) ?? Promise.resolve();
    const run = prev.then(async () => {
      const l = get();
      const wasPaused = l.spec.paused;
      if (!wasPaused) await l.backend.pause(id);
      try {
        return await fn();
      } finally {
        // A pause that came meanwhile keeps it frozen (resumes wait for this run: idle).
        if (!wasPaused && live() && !l.spec.paused) await l.backend.resume(id);
      }
    });
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.running.set(id, settled);
    void settled.then(() => {
      if (this.running.get(id) === settled) this.running.delete(id);
    });
    return run;
  }
}
