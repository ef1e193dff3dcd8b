import { WarrenError } from '@warren/api';
import type { EdgeApi, EdgeSandboxState } from '@warren/edge';
import type { SandboxRecord, Store } from '../store/store.js';
import type { Cluster } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';
import { edgeSpec, type DecodedFile } from './sandbox-view.js';
import type { Placement } from '../cluster/placement.js';

export interface PlacerOptions {
  logger: { warn(msg: string, meta?: unknown): void };
  /** Named steps where a fault-injection test crashes the process (see WarrenOptions.crashAt). */
  failpoint?: (step: string) => void;
  /** How long a create may take on a node before it is tried on the next one (ms; default 120,000). */
  createTimeoutMs?: number;
}

/** Starts recorded sandboxes on the nodes a placement names, in turn (see place). */
export class Placer {
  /** Creates placed, and the tries on another node after an edge refused or did not answer (for /metrics). */
  readonly counts = { created: 0, retried: 0 };

  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    private readonly o: PlacerOptions,
  ) {}

  /**
   * Starts a recorded sandbox on the placement's nodes in turn (`rec.node` is the first): an
   * edge that refuses (its own, fresher view says it is full) or cannot be reached passes it to
   * the next, the record following it there. When every node refused, the record goes (a
   * sandbox no node had room for never was) and the error says why per node.
   */
  async place(rec: SandboxRecord, first: Placement, files: DecodedFile[]): Promise<EdgeSandboxState> {
    const refused: Record<string, string> = {};
    const tried = new Set<string>();
    let last: WarrenError | null = null;
    let placement = first;
    for (;;) {
      for (const node of placement.order) {
        if (tried.has(node)) continue;
        const again = tried.size > 0;
        tried.add(node);
        if (again) {
          this.counts.retried++;
          if (!(await this.store.updateSandbox(rec.id, { node }, { from: ['creating'] })))
            throw new WarrenError('conflict', `sandbox ${rec.id} was deleted while it was being created`, { id: rec.id });
          // The first node counts it since it was placed (make).
          this.cluster.inFlightOn(node, rec.resources, 1);
        }
        rec.node = node;
        const tryOne = await this.tryNode(rec, node, files);
        if ('live' in tryOne) return tryOne.live;
        refused[node] = tryOne.refused.message;
        last = tryOne.refused;
      }
      if (placement.complete) break;
      // The sample is spent: every node, best first, but those tried.
      placement = this.cluster.placeAll(placement.request, tried);
      for (const [n, why] of Object.entries(placement.refused)) refused[n] ??= why;
    }
    await this.store.deleteSandbox(rec.id);
    // One node (warren up): its own error, as it said it.
    if (tried.size === 1 && Object.keys(refused).length === 1 && last) throw last;
    throw new WarrenError('resource_exhausted', 'no node can take this sandbox now', { nodes: refused, requested: rec.resources, backend: rec.backend });
  }

  /**
   * Creates a recorded sandbox on one node: its state, or why that node refused it (full, or
   * no answer within the deadline); any other failure fails the create.
   */
  private async tryNode(rec: SandboxRecord, node: string, files: DecodedFile[]): Promise<{ live: EdgeSandboxState } | { refused: WarrenError }> {
    let started: Promise<unknown> | null = null;
    let edge: EdgeApi | null = null;
    try {
      edge = this.cluster.edge(node);
      const creating = edge.create(edgeSpec(rec), files);
      started = creating;
      // A node that stops answering (or goes down) meanwhile passes the create on.
      const { load, ...live } = await within(this.o.createTimeoutMs ?? 120_000, `node ${node}`, creating, this.cluster.goneSignal(node));
      this.cluster.inFlightOn(node, rec.resources, -1, load);
      this.counts.created++;
      this.o.failpoint?.('create:started');
      return { live };
    } catch (e) {
      this.cluster.inFlightOn(node, rec.resources, -1);
      const err = e instanceof WarrenError ? e : null;
      // The edge admits a create before it starts anything (one call, not a check and then a
      // create): a refused one left nothing there. One given up on may still finish there: it
      // is destroyed there when it does (and a node that went down removes it when it joins again).
      if (err?.code === 'unavailable' && started && edge) {
        const there = edge;
        const destroy = (): Promise<void> => there.destroy(rec.id);
        void started.then(destroy, destroy).catch(() => undefined);
      }
      if (err?.code === 'resource_exhausted' || (err?.code === 'unavailable' && err.details.id === undefined)) return { refused: err };
      throw await this.createFailed(rec, e);
    }
  }

  /** A create that failed on its edge: the record says why; the error names the sandbox. */
  async createFailed(rec: SandboxRecord, e: unknown): Promise<WarrenError> {
    const err = e instanceof WarrenError ? e : new WarrenError('internal', 'sandbox creation failed');
    await this.store.updateSandbox(rec.id, { state: 'failed', error: { code: err.code, message: err.message } });
    this.o.logger.warn('create failed', {
      id: rec.id,
      node: rec.node,
      error: String(e),
      cause: e instanceof Error && e.cause instanceof Error ? e.cause.message : undefined,
    });
    return new WarrenError(err.code, err.message, { ...err.details, id: rec.id });
  }
}
