import { spawn } from 'node:child_process';
import { open, readFile } from 'node:fs/promises';
import { WarrenError } from '@warren/api';

/** Runs the runc CLI; rejects with runc's own message (from its log or stderr) when it fails. */
export async function runc(runcPath: string, args: string[], opts: { extraFd?: number; logFile?: string } = {}): Promise<void> {
  const log = opts.logFile ? await open(opts.logFile, 'a') : null;
  try {
    const stdio: Array<'ignore' | 'pipe' | number> = ['ignore', 'ignore', log ? log.fd : 'pipe'];
    if (opts.extraFd !== undefined) stdio.push(opts.extraFd);
    await new Promise<void>((resolve, reject) => {
      const child = spawn(runcPath, args, { stdio });
      let stderr = '';
      child.stderr?.on('data', (d: Buffer) => {
        if (stderr.length < 8192) stderr += d.toString();
      });
      child.on('error', reject);
      // 'exit', not 'close': a detached container may inherit and keep our stdio open.
      child.on('exit', (code, signal) => {
        if (code === 0) resolve();
        else reject(new Error(`runc ${args.find((a) => !a.startsWith('-') && !a.startsWith('/')) ?? ''} failed (${signal ?? code}): ${stderr.trim()}`));
      });
    });
  } catch (e) {
    const tail = opts.logFile ? (await readFile(opts.logFile, 'utf8').catch(() => '')).trim().split('\n').slice(-3).join(' | ') : '';
    throw new WarrenError('internal', 'the container runtime failed to start the sandbox', {}, { cause: tail ? new Error(tail) : e });
  } finally {
    await log?.close();
  }
}

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

export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
