import { randomText } from '@warren/api';

/** Sandbox ids sort by creation time, so the id doubles as a stable list cursor. */
export function newSandboxId(now = Date.now()): string {
  return `sb_${now.toString(36).padStart(9, '0')}${randomText(6, 'hex')}`;
}
