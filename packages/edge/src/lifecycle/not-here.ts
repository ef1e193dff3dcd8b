import { WarrenError } from '@warren/api';

/**
 * An edge's answer to a call on a sandbox it does not run: one that ended, was never made here,
 * or is not taken back yet after the edge restarted. `running: false` tells it from the other
 * conflicts of a call (a command that ended, a name taken), also across the edge protocol.
 */
export function notRunningHere(id: string): WarrenError {
  return new WarrenError('conflict', 'sandbox is not running on this node', { id, running: false });
}

/** Whether `e` is an edge's notRunningHere. */
export function isNotRunningHere(e: unknown): e is WarrenError {
  return e instanceof WarrenError && e.code === 'conflict' && e.details.running === false;
}
