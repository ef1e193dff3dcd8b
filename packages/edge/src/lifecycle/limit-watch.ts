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

/** A fresh sandbox's counters: nothing hit yet. */
const NONE: LimitCounts = { oomKills: 0, pidsMaxHits: 0 };

/**
 * What a command ran into of its sandbox's limits, asked only of a command that did not exit 0
 * (a success, and every start, read nothing: the hot path pays for none of it). The counters are
 * read at its end and compared with what the sandbox's last such check saw (`limitsSeen`: none
 * for a fresh sandbox, read at adopt for one taken back), which then moves on. So a counter that
 * rose during a command that succeeded is told with the next one that fails, and commands that
 * run at once share the rises, as the counters are the sandbox's.
 */
export function watchLimits(l: Pick<Live, 'backend' | 'spec' | 'limitsSeen'>): (end: LimitEnd) => Promise<LimitHit[]> {
  return async (end) => {
    const { backend } = l;
    const id = l.spec.id;
    const before = l.limitsSeen ?? NONE;
    const [after, full] = await Promise.all([
      backend.limitCounts?.(id).catch(() => null) ?? Promise.resolve(null),
      l.spec.resources.diskMiB && backend.diskFull ? backend.diskFull(id).catch(() => null) : Promise.resolve(null),
    ]);
    if (after) l.limitsSeen = after;
    return limitsHit(before, after, full, end);
  };
}
