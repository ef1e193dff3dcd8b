import { readFileSync } from 'node:fs';

/** Percentile of a list of numbers (nearest rank). */
export function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? NaN;
}

export const fmt = (ms: number): string => `${ms.toFixed(2)} ms`;

/** Runs `total` tasks with `concurrency` workers; returns per-task latencies and the wall time. */
export async function pool<T>(
  total: number,
  concurrency: number,
  task: (i: number) => Promise<T>,
): Promise<{ results: T[]; latencies: number[]; wallMs: number }> {
  const results: T[] = [];
  const latencies: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(concurrency, total) }, async () => {
      while (next < total) {
        const i = next++;
        const s = performance.now();
        results[i] = await task(i);
        latencies.push(performance.now() - s);
      }
    }),
  );
  return { results, latencies, wallMs: performance.now() - t0 };
}

/**
 * CPU seconds (user + system) a process has used so far; 0 once it is gone. `children`: with what
 * its children that ended used (once it waited for them: PostgreSQL's postmaster for a backend
 * whose connection closed), so that a sum over a server's processes does not drop when one ends.
 */
export function processCpuSeconds(pid: number | 'self', o: { children?: boolean } = {}): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    const own = Number(rest[11]) + Number(rest[12]);
    return (o.children ? own + Number(rest[13]) + Number(rest[14]) : own) / 100; // USER_HZ is 100 on Linux
  } catch {
    return 0;
  }
}
