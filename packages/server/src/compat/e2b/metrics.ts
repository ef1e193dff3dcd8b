import { WarrenError, type Sandbox } from '@warren/api';
import { BUSYBOX } from '@warren/edge';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';

/** E2B's SandboxMetric: one reading of a sandbox's CPU, memory and disk. */
export interface E2bMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

/** How far from a reading a range may end and still hold it (E2B aligns its readings to 5 s buckets). */
const SLACK_MS = 5000;

/** Used and total bytes of `df -P -k /`'s line (pure); null when there is none. */
export function parseDf(out: string): { used: number; total: number } | null {
  const line = out.trim().split('\n').pop() ?? '';
  const f = line.trim().split(/\s+/);
  const total = Number(f[1]);
  const used = Number(f[2]);
  return f.length >= 5 && Number.isFinite(total) && Number.isFinite(used) ? { used: used * 1024, total: total * 1024 } : null;
}

/** E2B's metric of a sandbox's usage as Warren reads it now, and its root file system's (pure). */
export function metricOf(s: Sandbox, disk: { used: number; total: number }, nowMs: number): E2bMetric {
  const cpuCount = Math.max(1, Math.ceil(s.resources.cpu));
  return {
    timestamp: new Date(nowMs).toISOString(),
    timestampUnix: Math.floor(nowMs / 1000),
    cpuCount,
    cpuUsedPct: Math.round((s.usage.cpuRecent / s.resources.cpu) * 10000) / 100,
    memUsed: s.usage.memoryBytes,
    memTotal: s.resources.memoryMiB * 2 ** 20,
    diskUsed: disk.used,
    diskTotal: disk.total,
  };
}

/**
 * `GET /sandboxes/{id}/metrics?start=&end=` (seconds): Warren keeps no history of a sandbox's
 * usage, so the answer is its reading now (CPU lately, memory, and the root file system as the
 * sandbox sees it, by the platform's df), when now is in the range asked for; none for a
 * sandbox that is not running (a paused one is read when it runs again).
 */
export async function metrics(d: RouteDeps, c: Caller, s: Sandbox, q: URLSearchParams): Promise<E2bMetric[]> {
  const bound = (k: string): number | undefined => {
    const v = q.get(k);
    if (v === null || v === '') return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new WarrenError('invalid_argument', `${k}: seconds since the epoch`);
    return n * 1000;
  };
  const start = bound('start');
  const end = bound('end');
  const now = Date.now();
  if (s.state !== 'running' || (start !== undefined && now < start - SLACK_MS) || (end !== undefined && now > end + SLACK_MS)) return [];
  const df = await d.commands.exec(c, s.id, { cmd: [BUSYBOX, 'df', '-P', '-k', '/'], user: 'root', timeoutMs: 10_000 }, true);
  const disk = parseDf(df.stdout);
  if (!disk) throw new WarrenError('internal', 'the sandbox’s disk could not be read');
  return [metricOf(s, disk, now)];
}
