import type { Live } from './live.js';

/**
 * What the edge's sweep decides, as pure functions of the live sandboxes and the time: which
 * sandboxes are past their TTL or idle timeout, which are due an idle pause, and which to pause
 * first when the node runs short of memory.
 */

export type Due = 'ttl' | 'idle' | 'pause';

function running(l: Live): boolean {
  for (const c of l.commands.values()) if (!c.done) return true;
  return false;
}

/** Sandboxes with something due at `now`: a TTL passed, an idle timeout passed, or an idle pause. */
export function dueNow(live: ReadonlyMap<string, Live>, now: number): Array<{ id: string; due: Due }> {
  const out: Array<{ id: string; due: Due }> = [];
  for (const [id, l] of live) {
    const s = l.spec;
    const busy = running(l);
    // Time paused does not count against the TTL unless the sandbox asked for it.
    const ttlRuns = !s.paused || s.ttlCountsPaused === true;
    if (ttlRuns && s.expiresAtMs !== null && now >= s.expiresAtMs) out.push({ id, due: 'ttl' });
    else if (s.idleTimeoutMs !== null && !busy && now - s.lastActivityMs >= s.idleTimeoutMs) out.push({ id, due: 'idle' });
    else if (!s.paused && !l.pausing && !l.resuming && s.pauseAfterIdleMs != null && !busy && now - s.lastActivityMs >= s.pauseAfterIdleMs) {
      out.push({ id, due: 'pause' });
    }
  }
  return out;
}

/** Running sandboxes with no command running, the longest idle first: what memory pressure pauses. */
export function longestIdleFirst(live: ReadonlyMap<string, Live>): string[] {
  return [...live]
    .filter(([, l]) => !l.spec.paused && !l.pausing && !running(l))
    .sort(([, a], [, b]) => a.spec.lastActivityMs - b.spec.lastActivityMs)
    .map(([id]) => id);
}

/** Memory a node keeps available by default: 5 % of it, at least 512 MiB (an eighth of it on a node under 4 GiB). */
export function defaultMemoryFloorMiB(totalBytes: number): number {
  const mib = totalBytes / 2 ** 20;
  return Math.floor(Math.max(Math.min(512, mib / 8), mib / 20));
}

/** What memory pressure does next: page out a running idle sandbox, or pause one. */
export type Relief = { kind: 'pageOut' | 'pause'; id: string };

/**
 * The next step to make `wantMiB` available when `availableMiB` are (null: there is enough, or
 * nothing more can be done). Idle sandboxes only, never one with a command running: first the
 * longest-idle one not paged out since its last activity is paged out where it runs (its memory
 * to compressed swap, faulted back in when it is used); once every idle one is, the longest-idle
 * one is paused (frozen, then paged out again: nothing it does can bring its memory back). Pure.
 */
export function nextRelief(live: ReadonlyMap<string, Live>, availableMiB: number, wantMiB: number): Relief | null {
  if (availableMiB >= wantMiB) return null;
  const idle = longestIdleFirst(live);
  const fresh = idle.find((id) => {
    const l = live.get(id)!;
    return l.backend.pageOut !== undefined && (l.pagedOutAtMs === null || l.pagedOutAtMs < l.spec.lastActivityMs);
  });
  if (fresh !== undefined) return { kind: 'pageOut', id: fresh };
  const first = idle.find((id) => live.get(id)!.backend.capabilities.pause);
  return first === undefined ? null : { kind: 'pause', id: first };
}
