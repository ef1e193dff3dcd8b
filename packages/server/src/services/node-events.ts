import type { EdgeEvent } from '@warren/edge';
import type { Store } from '../store/store.js';

/** What a node's events act on. */
export interface NodeEventTargets {
  store: Pick<Store, 'getSandbox'>;
  sandboxes: {
    stateChanged(id: string, s: { paused: boolean; expiresAtMs: number | null; reason?: 'memory' }): Promise<void>;
    expire(id: string, reason: 'ttl' | 'idle'): Promise<void>;
    died(id: string, why?: { reason?: 'exited' | 'oom'; detail?: string }): Promise<void>;
  };
  /** Whether `node` is the edge in this process (`warren up`). */
  local(node: string): boolean;
  logger: { warn(msg: string, meta?: unknown): void };
}

/**
 * How the control plane takes an edge's events: each one only for a sandbox on the node that
 * sent it. A node speaks for its own sandboxes, never another's: an event naming a sandbox the
 * store places elsewhere (a compromised or fake edge ending other nodes' sandboxes by id) is
 * ignored and logged. Sandboxes with no record (a warm pool's, on the local edge) are the local
 * edge's only; FnCall's workers are each edge's own, and it sends no events of them.
 */
export function nodeEventHandler(t: NodeEventTargets): (node: string, ev: EdgeEvent) => Promise<void> {
  const ignored = (node: string, ev: EdgeEvent, on: string | null): void =>
    t.logger.warn('an edge event for a sandbox that is not on that node was ignored', { node, event: ev, on });
  return async (node, ev) => {
    if (ev.type !== 'state' && ev.type !== 'expired' && ev.type !== 'died') return ignored(node, ev, null);
    const rec = await t.store.getSandbox(ev.id);
    if (rec ? rec.node !== node : !t.local(node)) return ignored(node, ev, rec?.node ?? null);
    if (ev.type === 'state') return t.sandboxes.stateChanged(ev.id, ev);
    if (ev.type === 'expired') return t.sandboxes.expire(ev.id, ev.reason);
    return t.sandboxes.died(ev.id, { reason: ev.reason, detail: ev.detail });
  };
}
