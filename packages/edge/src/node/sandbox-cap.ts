import { readFile } from 'node:fs/promises';
import { BLOCK_PREFIX, slotCount } from '../net/addresses.js';

/** Tasks a sandbox takes at least once in use: its init, a shell and one process in it. */
export const TASKS_PER_SANDBOX = 3;

/**
 * The sandboxes a node holds at most unless told: as many as its network block has links
 * (16,384), or fewer when the kernel's task ids (kernel.pid_max, host-wide) leave fewer than
 * TASKS_PER_SANDBOX each, so that a full node refuses a create instead of failing a fork. Pure.
 * @example defaultMaxSandboxes(32768) // 10922: the kernel's default pid_max
 */
export function defaultMaxSandboxes(pidMax: number): number {
  const links = slotCount({ base: 0, prefix: BLOCK_PREFIX });
  return Math.max(1, Math.min(links, Math.floor(pidMax / TASKS_PER_SANDBOX)));
}

/** The host's kernel.pid_max (the kernel's default, 32768, when it cannot be read). */
export async function pidMax(): Promise<number> {
  const n = Number((await readFile('/proc/sys/kernel/pid_max', 'utf8').catch(() => '')).trim());
  return Number.isInteger(n) && n > 0 ? n : 32768;
}
