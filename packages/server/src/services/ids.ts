import { randomBytes } from 'node:crypto';

/** Sandbox ids sort by creation time, so the id doubles as a stable list cursor. */
export function newSandboxId(now = Date.now()): string {
  return `sb_${now.toString(36).padStart(9, '0')}${randomBytes(6).toString('hex')}`;
}
