import { endNow, type SandboxEndRecord, type SandboxRecord, type Store } from '../store/store.js';

/** The live states a record ends from. */
const RUNNING_OR_CREATING: Array<SandboxRecord['state']> = ['creating', 'running', 'paused'];
import type { Cluster } from '../cluster/cluster.js';
import { RUNNING } from './sandbox-view.js';
import { edgeSpec } from '../placement/edge-spec.js';
import type { EdgeLease } from '@warren/edge';
import type { LeaseBook } from '../placement/lease-book.js';

export interface NodeSyncOptions {
  logger: { warn(msg: string, meta?: unknown): void };
}

/**
 * Keeps the store and the nodes agreeing: a node that (re)joins is reconciled, creates no
 * control plane finishes are ended, the edges' activity times are written back.
 */
export class NodeSync {
  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    private readonly o: NodeSyncOptions,
    private readonly leases: LeaseBook,
    /** Told of each end this records (lifecycle events). */
    private readonly ended: (rec: SandboxRecord, end: SandboxEndRecord) => void = () => undefined,
  ) {}

  /**
   * Makes the store and a node agree, when the node's edge (re)starts or joins again: records of
   * sandboxes the edge still holds stay; the others are taken back if their processes survived
   * (adopt) or marked failed and removed; what the edge holds that no live record names (a
   * sandbox failed while its node was down, a create that timed out) is destroyed. Nothing ends
   * both failed and alive, nor alive and unknown.
   */
  async reconcile(node: string): Promise<{ kept: number; adopted: number; failed: number; removed: number }> {
    const edge = this.cluster.edge(node);
    // The edge's list first: a sandbox it holds was recorded before it was created.
    const held = new Set((await edge.sandboxes()).map((x) => x.id));
    const recs = await this.store.liveOnNode(node);
    const named = new Set(recs.map((r) => r.id));
    let kept = 0;
    let adopted = 0;
    let failed = 0;
    let next = 0;
    // Each lease read once from the store for all its sandboxes here.
    const leases = new Map<string, Promise<EdgeLease | null>>();
    const leaseOf = (id: string): Promise<EdgeLease | null> => {
      let p = leases.get(id);
      if (!p) leases.set(id, (p = this.store.leases.get(id).then((l) => (l ? this.leases.learn(l) : null))));
      return p;
    };
    const one = async (rec: SandboxRecord): Promise<void> => {
      if (held.has(rec.id) && rec.state !== 'creating') {
        kept++;
        return;
      }
      // Its lease as the store has it now (one that ended while the node was away freezes it there).
      const lease = rec.lease ? await leaseOf(rec.lease) : null;
      const ok =
        rec.state !== 'creating' &&
        (await edge.adopt(edgeSpec(rec, lease)).catch((e: unknown) => {
          this.o.logger.warn('could not take back a sandbox', { id: rec.id, error: String(e) });
          return false;
        }));
      if (ok) {
        await this.store.updateSandbox(rec.id, { state: 'running' }, { from: RUNNING });
        adopted++;
      } else {
        await edge.destroy(rec.id).catch(() => undefined);
        const message = 'the sandbox ended while its node was away';
        const end = endNow('node_lost', message);
        if (await this.store.updateSandbox(rec.id, { state: 'failed', error: { code: 'unavailable', message }, end }, { from: RUNNING_OR_CREATING }))
          this.ended(rec, end);
        failed++;
      }
    };
    // Several at a time: one slow sandbox (an init that does not answer) must not hold the rest.
    await Promise.all(
      Array.from({ length: Math.min(16, recs.length) }, async () => {
        while (next < recs.length) await one(recs[next++]!);
      }),
    );
    const unknown = [...held].filter((id) => !named.has(id));
    for (const id of unknown)
      await edge.destroy(id).catch((e: unknown) => this.o.logger.warn('could not remove a sandbox no record names', { id, error: String(e) }));
    const leftovers = await edge.removeLeftovers();
    if (leftovers.length) this.o.logger.warn('removed leftover sandboxes', { node, ids: leftovers });
    return { kept, adopted, failed, removed: unknown.length + leftovers.length };
  }

  /**
   * Ends creates that no control plane finishes: records still `creating` long after they were
   * made (`olderThanMs`, well past any create's deadline), left by a replica that died in the
   * middle. Each is failed (by one replica: the state changes only from `creating`) and what its
   * node started is destroyed there (a node that is down does it when it joins again). Answers
   * the ids ended.
   */
  async endStaleCreates(olderThanMs: number): Promise<string[]> {
    const ended: string[] = [];
    for (const rec of await this.store.staleCreating(olderThanMs, 1000)) {
      const error = { code: 'unavailable', message: 'its create was cut off (the control plane making it stopped)' };
      const end = endNow('infra', error.message);
      if (!(await this.store.updateSandbox(rec.id, { state: 'failed', error, end }, { from: ['creating'] }))) continue;
      this.ended(rec, end);
      ended.push(rec.id);
      if (this.cluster.up().some((n) => n.id === rec.node))
        await this.cluster
          .edge(rec.node)
          .destroy(rec.id)
          .catch((e: unknown) => this.o.logger.warn('could not remove a sandbox whose create was cut off', { id: rec.id, error: String(e) }));
    }
    if (ended.length) this.o.logger.warn('ended creates no control plane finished', { ids: ended });
    return ended;
  }

  /**
   * Writes the edges' activity times back to the store: only the sandboxes with activity since
   * the last flush (the edge keeps track), one write per node; cheap at any count. Called periodically.
   */
  async flushActivity(): Promise<void> {
    for (const n of this.cluster.up()) {
      const touched = await n.api.sandboxes({ touched: true });
      await this.store.setActivity(touched.map((s) => ({ id: s.id, at: s.lastActivityMs })));
    }
  }
}
