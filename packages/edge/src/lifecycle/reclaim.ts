import type { Backend } from '../backends/backend.js';
import type { Live } from './live.js';

/**
 * The page-out of a paused sandbox, in the background: a pause answers once the sandbox is
 * frozen, and a resume or a delete stops the page-out and waits until it has.
 */

/** Starts reclaiming a frozen sandbox's memory; what stays resident is kept on `l` for admission. */
export function startReclaim(backend: Backend, id: string, l: Live, logger?: { warn(msg: string, meta?: unknown): void }): void {
  const ac = new AbortController();
  const done: Promise<void> = backend
    .reclaim(id, ac.signal)
    .then(
      (bytes) => {
        if (!ac.signal.aborted) l.residentWhilePaused = bytes;
      },
      (e: unknown) => {
        if (!ac.signal.aborted) logger?.warn('page-out of a paused sandbox failed', { id, error: String(e) });
      },
    )
    .finally(() => {
      if (l.reclaim?.done === done) l.reclaim = null;
    });
  l.reclaim = { abort: () => ac.abort(), done };
}

/** Stops a page-out under way (a resume or a delete) and waits until it has. */
export async function stopReclaim(l: Live): Promise<void> {
  const r = l.reclaim;
  if (!r) return;
  r.abort();
  await r.done;
}
