import type { Backend } from '../backends/backend.js';
import type { Live } from './live.js';

/** What the edge does when a sandbox's init ended without its doing (tells its owner). */
export type OnEnded = (id: string, l: Live) => Promise<void>;

/**
 * Has the backend tell when a sandbox's init ends (warren-hostd's pidfd for a container's),
 * instead of the sweep looking at it: at 10,000 sandboxes, reading every init's /proc/PID/stat
 * every 2 s took a quarter of a core at rest and delayed every call behind it.
 */
export async function watchEnd(live: ReadonlyMap<string, Live>, id: string, l: Live, ended: OnEnded): Promise<void> {
  const onExit = (): void => {
    // A sandbox the edge removed (or replaced under the same id) meanwhile is none of this.
    if (live.get(id) !== l) return;
    l.endSeen = true;
    void ended(id, l);
  };
  l.watched = (await l.backend.watchExit?.(l.sb, onExit).catch(() => false)) ?? false;
}

/**
 * Notices sandboxes whose init is gone among those whose backend does not say so itself, so
 * they are reported failed instead of looking alive. A paused one is not looked at: it runs
 * nothing, and its resume finds out. One whose end the backend told and that is still here is
 * reported again (its owner removes it once it recorded the end: until then, every check).
 */
export async function checkAlive(live: ReadonlyMap<string, Live>, ended: OnEnded): Promise<void> {
  for (const [id, l] of [...live]) {
    if (l.endSeen) await ended(id, l);
    if (l.watched || l.spec.paused) continue;
    if (await l.backend.exited(l.sb).catch(() => false)) await ended(id, l);
  }
}

/** Destroys what the backends still have (on disk, running) that is not live here; answers their ids. */
export async function removeUnowned(backends: readonly Backend[], live: ReadonlyMap<string, Live>): Promise<string[]> {
  const gone: string[] = [];
  for (const b of backends) {
    for (const id of await b.list()) {
      if (live.has(id)) continue;
      await b.destroy(id).catch(() => undefined);
      gone.push(id);
    }
  }
  return gone;
}
