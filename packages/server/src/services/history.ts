import type { HistoryPoint } from '@warren/api';

/** What the history samples: counters (rates are taken between samples) and levels. */
export interface HistoryTotals {
  creates: number;
  commands: number;
  commandErrors: number;
  fnCalls: number;
  running: number;
  paused: number;
  cpuUsed: number;
  memoryUsedMiB: number;
}

/** How often a replica samples (10 s) and how many samples it keeps (an hour's). */
export const HISTORY_INTERVAL_MS = 10_000;
export const HISTORY_POINTS = 360;

const rate = (from: number, to: number, seconds: number): number => (seconds > 0 ? Math.round((Math.max(0, to - from) / seconds) * 100) / 100 : 0);

/**
 * A point from two samples: counters' rates over the time between them (a counter that went
 * back, a node restarted, counts 0), levels as at the later one. Pure.
 */
export function historyPoint(prev: HistoryTotals, cur: HistoryTotals, seconds: number, atMs: number): HistoryPoint {
  return {
    at: new Date(atMs).toISOString(),
    createsPerSecond: rate(prev.creates, cur.creates, seconds),
    commandsPerSecond: rate(prev.commands, cur.commands, seconds),
    commandErrorsPerSecond: rate(prev.commandErrors, cur.commandErrors, seconds),
    fnCallsPerSecond: rate(prev.fnCalls, cur.fnCalls, seconds),
    running: cur.running,
    paused: cur.paused,
    cpuUsed: Math.round(cur.cpuUsed * 100) / 100,
    memoryUsedMiB: Math.round(cur.memoryUsedMiB),
  };
}

/**
 * A replica's recent history, sampled every `intervalMs` (first at start), the last `keep`
 * points kept: what the dashboard's charts draw. A sample that fails is skipped (logged).
 */
export class MetricsHistory {
  private readonly points: HistoryPoint[] = [];
  private last: { atMs: number; totals: HistoryTotals } | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly o: {
      sample: () => Promise<HistoryTotals>;
      now?: () => number;
      intervalMs?: number;
      keep?: number;
      logger?: { warn(msg: string, meta?: unknown): void };
    },
  ) {}

  get intervalMs(): number {
    return this.o.intervalMs ?? HISTORY_INTERVAL_MS;
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
    void this.tick();
  }

  /** Takes one sample (the timer's; tests call it). */
  async tick(): Promise<void> {
    let totals: HistoryTotals;
    try {
      totals = await this.o.sample();
    } catch (e) {
      this.o.logger?.warn('a metrics sample failed', { error: String(e) });
      return;
    }
    const atMs = (this.o.now ?? Date.now)();
    if (this.last) {
      this.points.push(historyPoint(this.last.totals, totals, (atMs - this.last.atMs) / 1000, atMs));
      if (this.points.length > (this.o.keep ?? HISTORY_POINTS)) this.points.shift();
    }
    this.last = { atMs, totals };
  }

  list(): HistoryPoint[] {
    return [...this.points];
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
