import { readFileSync } from 'node:fs';
import { readFile, readdir, readlink, realpath } from 'node:fs/promises';
import type { ExitWatcher } from './hostd.js';

/** The fields of a /proc/PID/stat line after the command name (the state is the first). */
function statFields(stat: string): string[] {
  // The command name may hold spaces and parentheses: fields resume after the last ')'.
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** State letter and start time (clock ticks after boot) of a /proc/PID/stat line. */
export function parseProcStat(stat: string): { state: string; startTime: number } {
  const rest = statFields(stat);
  return { state: rest[0] ?? '', startTime: Number(rest[19]) };
}

/** CPU seconds (user + system) a process has used; null when it is gone. */
export async function processCpuSeconds(pid: number): Promise<number | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return null;
  const rest = statFields(stat);
  return (Number(rest[11]) + Number(rest[12])) / 100; // USER_HZ is 100 on Linux
}

/**
 * The pid a pidfile names, when that process runs `program` and holds the pidfile open (as QEMU
 * does): a pid reused by anything else since, or a stale file, gives null. The open file names
 * the process's directory wherever it has moved since (a renamed directory included).
 */
export async function pidfileProcess(pidFile: string, program: string): Promise<number | null> {
  const pid = Number((await readFile(pidFile, 'utf8').catch(() => '')).trim());
  if (!(pid > 0)) return null;
  const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
  if (argv[0] !== program) return null;
  const want = await realpath(pidFile).catch(() => null);
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
    if (want && (await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')) === want) return pid;
  }
  return null;
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

/**
 * processExited, read at once: /proc/PID/stat is made by the kernel on the read, never waits on a
 * disk, and a read of it takes microseconds where an asynchronous one takes four trips through
 * Node's thread pool (a loop that waits for a process to end reads it every millisecond).
 */
export function processExitedNow(pid: number, startTime?: number | null): boolean {
  let s: { state: string; startTime: number };
  try {
    s = parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
  if (s.state === 'Z' || s.state === 'X') return true;
  return startTime != null && s.startTime !== startTime;
}

/**
 * Which of these host pids is PID 1 of its own pid namespace, one level down (NSpid has exactly
 * two entries, the last 1): a sandbox's init among the processes of its cgroup. A process that
 * is PID 1 of a namespace the sandbox made itself has more entries and never matches.
 */
export async function findNamespaceInit(pids: number[]): Promise<number | null> {
  for (const pid of pids) {
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const ns = /^NSpid:\s+(.*)$/m.exec(status)?.[1]?.trim().split(/\s+/);
    if (ns?.length === 2 && ns[1] === '1') return pid;
  }
  return null;
}

/**
 * The host id that root of a process's user namespace maps to (the first line of its uid_map),
 * or null. The map is the kernel's, written once when the namespace was made: nothing inside
 * the namespace can change it, unlike the owner of any file the sandbox can write.
 */
export function parseUidMapBase(uidMap: string): number | null {
  const m = /^\s*0\s+(\d+)\s+\d+/.exec(uidMap);
  return m?.[1] ? Number(m[1]) : null;
}

export async function userNamespaceBase(pid: number): Promise<number | null> {
  return parseUidMapBase(await readFile(`/proc/${pid}/uid_map`, 'utf8').catch(() => ''));
}

/**
 * Waits (at most `ms`) for a process to end: the watcher's word (warren-hostd's, that it reaped
 * it) wakes the wait, and /proc is read every 10 ms besides (a process the helper does not
 * watch, a helper restarted meanwhile). A delete that read it every millisecond paid ~10 timers
 * and reads for its init's end.
 */
export async function waitExited(pid: number, startTime: number, ms: number, exits?: ExitWatcher): Promise<void> {
  if (processExitedNow(pid, startTime)) return;
  let told = false;
  let wake = (): void => undefined;
  const onExit = (): void => {
    told = true;
    wake();
  };
  exits?.watchExit(pid, startTime, onExit).catch(() => undefined);
  try {
    const deadline = Date.now() + ms;
    while (!told && !processExitedNow(pid, startTime) && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 10);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  } finally {
    // A process that outlives the wait (a delete tried again) leaves no callback behind.
    exits?.unwatchExit?.(pid, startTime, onExit);
  }
}

/** The node's available memory (/proc/meminfo MemAvailable), MiB: read at once, as processExitedNow reads. */
export async function memAvailableMiB(): Promise<number> {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'));
  return Number(m?.[1] ?? 0) / 1024;
}
