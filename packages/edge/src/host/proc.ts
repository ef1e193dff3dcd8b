import { readFile } from 'node:fs/promises';

/** State letter and start time (clock ticks after boot) of a /proc/PID/stat line. */
export function parseProcStat(stat: string): { state: string; startTime: number } {
  // The command name may hold spaces and parentheses: fields resume after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: rest[0] ?? '', startTime: Number(rest[19]) };
}

async function readStat(pid: number): Promise<{ state: string; startTime: number } | null> {
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return null;
  }
}

/** A live process's start time, which with its pid names it even after the pid is reused. */
export async function processStartTime(pid: number): Promise<number | null> {
  const s = await readStat(pid);
  return s && s.state !== 'Z' && s.state !== 'X' ? s.startTime : null;
}

/**
 * Whether a process has exited. A zombie counts as exited (a parent may take seconds to reap
 * it), and so does a different process that got the same pid when `startTime` is given.
 */
export async function processExited(pid: number, startTime?: number | null): Promise<boolean> {
  const s = await readStat(pid);
  if (!s || s.state === 'Z' || s.state === 'X') return true;
  return startTime != null && s.startTime !== startTime;
}
