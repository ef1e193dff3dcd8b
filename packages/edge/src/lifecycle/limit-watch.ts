import type { LimitHit } from '@warren/api';
import type { LimitCounts } from '../backends/backend.js';
import type { Live } from './live.js';

/** What a command's end tells of its sandbox's own limits (see LimitHit). */
export interface LimitEnd {
  /** The OOM killer ended the command itself (its killedBy). */
  oomKilled: boolean;
}

/**
 * The limits hit while a command ran: a counter that rose between its start and its end, its
 * sandbox's disk full at its end, an OOM kill that ended it.
 */
export function limitsHit(before: LimitCounts | null, after: LimitCounts | null, diskFull: boolean | null, end: LimitEnd): LimitHit[] {
  const rose = (k: keyof LimitCounts): boolean => {
    const [b, a] = [before?.[k], after?.[k]];
    return typeof a === 'number' && typeof b === 'number' && a > b;
  };
  const hit: LimitHit[] = [];
  if (end.oomKilled || rose('oomKills')) hit.push('memory');
  if (rose('pidsMaxHits')) hit.push('pids');
  if (diskFull === true) hit.push('disk');
  return hit;
}

/**
 * Watches a sandbox's limits around one command: its counters are read now (as it starts, in
 * the background: the start waits for nothing), and again by what this answers, which a command
 * asks only when it did not exit 0 (a success reads nothing more).
 */
export function watchLimits(l: Pick<Live, 'backend' | 'spec'>): (end: LimitEnd) => Promise<LimitHit[]> {
  const { backend } = l;
  const id = l.spec.id;
  const counts = (): Promise<LimitCounts | null> => backend.limitCounts?.(id).catch(() => null) ?? Promise.resolve(null);
  const before = counts();
  return async (end) => {
    const [b, a, full] = await Promise.all([
      before,
      counts(),
      l.spec.resources.diskMiB && backend.diskFull ? backend.diskFull(id).catch(() => null) : Promise.resolve(null),
    ]);
    return limitsHit(b, a, full, end);
  };
}
