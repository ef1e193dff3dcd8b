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
