import { readFile } from 'node:fs/promises';

/** The host pid of a container's init from runc's state file; null when runc has no state. */
export async function runcInitPid(runcRoot: string, id: string): Promise<number | null> {
  try {
    const state = JSON.parse(await readFile(`${runcRoot}/${id}/state.json`, 'utf8')) as { init_process_pid?: number };
    return typeof state.init_process_pid === 'number' ? state.init_process_pid : null;
  } catch {
    return null;
  }
}

/**
 * Whether a process has exited. A zombie counts as exited: its parent after `runc run -d` is the
 * host's init, which may take seconds to reap it, and runc itself treats a zombie as stopped.
 */
export async function processExited(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'Z' || state === 'X';
  } catch {
    return true;
  }
}
