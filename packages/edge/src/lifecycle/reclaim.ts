import type { Backend } from '../backends/backend.js';
import type { Live } from './live.js';
import type { Semaphore } from '../util/semaphore.js';

/**
 * The page-out of a paused sandbox, in the background: a pause answers once the sandbox is
 * frozen, and a resume or a delete stops the page-out and waits until it has.
 */

/**
 * Starts reclaiming a frozen sandbox's memory; what stays resident is kept on `l` for admission.
 * `gate` bounds the page-outs at once (a thousand sandboxes paused together, by a lease's lapse,
 * must not start a thousand page-out processes at once); `settled` is told once the page-out is
 * over (done, failed or stopped) and `l.reclaim` is cleared.
 */
export function startReclaim(
  backend: Backend,
  id: string,
  l: Live,
  o: { logger?: { warn(msg: string, meta?: unknown): void }; gate?: Semaphore; settled?: () => void } = {},
): void {
  const { logger, gate } = o;
  const ac = new AbortController();
  let started = false;
  const reclaim = (): Promise<number> => {
    if (ac.signal.aborted) return Promise.resolve(0);
    started = true;
    return backend.reclaim(id, ac.signal);
  };
  const settled = (gate ? gate.run(reclaim) : reclaim()).then(
    (bytes) => {
      if (!ac.signal.aborted) l.residentWhilePaused = bytes;
    },
    (e: unknown) => {
      if (!ac.signal.aborted) logger?.warn('page-out of a paused sandbox failed', { id, error: String(e) });
    },
  );
  // Stopped while it still waits its turn: done at once (a resume does not wait for the others' page-outs).
  const done: Promise<void> = new Promise<void>((resolve) => {
    void settled.then(resolve);
    ac.signal.addEventListener('abort', () => !started && resolve(), { once: true });
  }).finally(() => {
    if (l.reclaim?.done !== done) return;
    l.reclaim = null;
    o.settled?.();
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
