import { WarrenError } from '@warren/api';
import { MAX_CREATE_MANY, type CreateOutcome, type EdgeApi, type EdgeLoad, type EdgeSandboxState } from '@warren/edge';
import { endNow, type SandboxEndRecord, type SandboxRecord, type Store } from '../store/store.js';
import type { Cluster } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';
import { edgeSpec, type DecodedFile } from './edge-spec.js';
import type { Placement } from './policy.js';
import type { NodeView } from './node-view.js';
import type { LeaseBook } from './lease-book.js';

export interface PlacerOptions {
  logger: { warn(msg: string, meta?: unknown): void };
  /** Named steps where a fault-injection test crashes the process (see WarrenOptions.crashAt). */
  failpoint?: (step: string) => void;
  /**
   * How long a create may take on a node before it is tried on the next one (ms; default
   * 120,000; a full VM's at least VM_CREATE_TIMEOUT_MS).
   */
  createTimeoutMs?: number;
}

/**
 * The least time a full VM's create is given: the first create of an image on a node boots it to
 * its desktop under systemd (its template), minutes under TCG.
 */
export const VM_CREATE_TIMEOUT_MS = 900_000;

/**
 * Whether a node's error passes a create on to the next node: it refused (full on its own view),
 * or could not be reached; not a sandbox that failed there (an `unavailable` naming it).
 */
const refusal = (e: WarrenError): boolean => e.code === 'resource_exhausted' || (e.code === 'unavailable' && e.details.id === undefined);

/** Starts recorded sandboxes on the nodes a placement names, in turn (see place). */
export class Placer {
  /** Creates placed, and the tries on another node after an edge refused or did not answer (for /metrics). */
  readonly counts = { created: 0, retried: 0 };

  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    /** Where creates go, and the creates in flight it counts. */
    private readonly view: NodeView,
    private readonly o: PlacerOptions,
    /** The leases a create's spec carries. */
    private readonly leases: LeaseBook,
    /** Told of a create's end it records (lifecycle events). */
    private readonly ended: (rec: SandboxRecord, end: SandboxEndRecord) => void = () => undefined,
  ) {}

  /**
   * Starts a recorded sandbox on the placement's nodes in turn (`rec.node` is the first): an
   * edge that refuses (its own, fresher view says it is full) or cannot be reached passes it to
   * the next, the record following it there. When every node refused, the record goes (a
   * sandbox no node had room for never was) and the error says why per node.
   */
  async place(
    rec: SandboxRecord,
    first: Placement,
    files: DecodedFile[],
    /** A node that already refused it (a batch's createMany), and why. */
    before?: { node: string; refused: WarrenError },
  ): Promise<EdgeSandboxState> {
    const refused: Record<string, string> = before ? { [before.node]: before.refused.message } : {};
    const tried = new Set<string>(before ? [before.node] : []);
    let last: WarrenError | null = before?.refused ?? null;
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
          this.view.inFlightOn(node, rec.resources, 1);
        }
        rec.node = node;
        const tryOne = await this.tryNode(rec, node, files);
        if ('live' in tryOne) return tryOne.live;
        refused[node] = tryOne.refused.message;
        last = tryOne.refused;
      }
      if (placement.complete) break;
      // The sample is spent: every node, best first, but those tried.
      placement = this.view.placeAll(placement.request, tried);
      for (const [n, why] of Object.entries(placement.refused)) refused[n] ??= why;
    }
    await this.store.deleteSandbox(rec.id);
    // One node (warren up): its own error, as it said it.
    if (tried.size === 1 && Object.keys(refused).length === 1 && last) throw last;
    throw new WarrenError('resource_exhausted', 'no node can take this sandbox now', { nodes: refused, requested: rec.resources, backend: rec.backend });
  }

  /**
   * Starts a batch's recorded sandboxes: those placed on one node go in one createMany call (at
   * most MAX_CREATE_MANY a call), the nodes' calls side by side. One its node refused, or whose
   * call got no answer, goes on as a single create does (`place`, from the next node); any other
   * failure fails it. Answers each one's state or error, in order.
   */
  async placeMany(items: Array<{ rec: SandboxRecord; placement: Placement }>, files: DecodedFile[]): Promise<Array<PromiseSettledResult<EdgeSandboxState>>> {
    const out = new Array<PromiseSettledResult<EdgeSandboxState>>(items.length);
    const byNode = new Map<string, number[]>();
    items.forEach((it, i) => {
      const on = byNode.get(it.rec.node) ?? [];
      on.push(i);
      byNode.set(it.rec.node, on);
    });
    const calls: Array<Promise<void>> = [];
    for (const [node, at] of byNode)
      for (let k = 0; k < at.length; k += MAX_CREATE_MANY) {
        const group = at.slice(k, k + MAX_CREATE_MANY);
        calls.push(
          this.createGroup(
            node,
            group.map((i) => items[i]!),
            files,
          ).then((rs) => group.forEach((i, j) => (out[i] = rs[j]!))),
        );
      }
    await Promise.all(calls);
    return out;
  }

  /** One createMany call on `node` for `group` (see placeMany). */
  private async createGroup(
    node: string,
    group: Array<{ rec: SandboxRecord; placement: Placement }>,
    files: DecodedFile[],
  ): Promise<Array<PromiseSettledResult<EdgeSandboxState>>> {
    const settle = (p: Promise<EdgeSandboxState>): Promise<PromiseSettledResult<EdgeSandboxState>> =>
      p.then(
        (value) => ({ status: 'fulfilled', value }),
        (reason: unknown) => ({ status: 'rejected', reason }),
      );
    const onward = (it: { rec: SandboxRecord; placement: Placement }, why: WarrenError): Promise<PromiseSettledResult<EdgeSandboxState>> =>
      settle(this.place(it.rec, it.placement, files, { node, refused: why }));
    let started: Promise<unknown> | null = null;
    let edge: EdgeApi | null = null;
    let answer: { outcomes: CreateOutcome[]; load: EdgeLoad };
    try {
      edge = this.cluster.edge(node);
      const creating = edge.createMany(
        group.map((it) => edgeSpec(it.rec, this.leases.of(it.rec.lease))),
        files,
      );
      started = creating;
      answer = await within(Math.max(...group.map((it) => this.timeoutFor(it.rec))), `node ${node}`, creating, this.cluster.goneSignal(node));
    } catch (e) {
      for (const it of group) this.view.inFlightOn(node, it.rec.resources, -1);
      const err = e instanceof WarrenError ? e : null;
      // Given up on, the call may still finish there: what it made is destroyed when it does.
      if (err?.code === 'unavailable' && started && edge) {
        const there = edge;
        const destroy = (): Promise<unknown> => Promise.allSettled(group.map((it) => there.destroy(it.rec.id)));
        void started.then(destroy, destroy).catch(() => undefined);
      }
      if (err && refusal(err)) return Promise.all(group.map((it) => onward(it, err)));
      return Promise.all(group.map((it) => settle(this.createFailed(it.rec, e).then((f) => Promise.reject(f)))));
    }
    this.o.failpoint?.('create:started');
    return Promise.all(
      group.map((it, k) => {
        this.view.inFlightOn(node, it.rec.resources, -1, k === group.length - 1 ? answer.load : undefined);
        const o = answer.outcomes[k];
        if (o && 'state' in o) {
          this.counts.created++;
          return Promise.resolve({ status: 'fulfilled', value: o.state } as const);
        }
        const err = o ? new WarrenError(o.error.code, o.error.message, o.error.details) : new WarrenError('internal', 'the node answered no outcome for it');
        if (refusal(err)) return onward(it, err);
        return settle(this.createFailed(it.rec, err).then((f) => Promise.reject(f)));
      }),
    );
  }

  /** How long a node has for the create of `rec` (a batch's sandboxes share one backend). */
  private timeoutFor(rec: SandboxRecord): number {
    const base = this.o.createTimeoutMs ?? 120_000;
    return rec.backend === 'vm' ? Math.max(base, VM_CREATE_TIMEOUT_MS) : base;
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
      const creating = edge.create(edgeSpec(rec, this.leases.of(rec.lease)), files);
      started = creating;
      // A node that stops answering (or goes down) meanwhile passes the create on.
      const { load, ...live } = await within(this.timeoutFor(rec), `node ${node}`, creating, this.cluster.goneSignal(node));
      this.view.inFlightOn(node, rec.resources, -1, load);
      this.counts.created++;
      this.o.failpoint?.('create:started');
      return { live };
    } catch (e) {
      this.view.inFlightOn(node, rec.resources, -1);
      const err = e instanceof WarrenError ? e : null;
      // The edge admits a create before it starts anything (one call, not a check and then a
      // create): a refused one left nothing there. One given up on may still finish there: it
      // is destroyed there when it does (and a node that went down removes it when it joins again).
      if (err?.code === 'unavailable' && started && edge) {
        const there = edge;
        const destroy = (): Promise<void> => there.destroy(rec.id);
        void started.then(destroy, destroy).catch(() => undefined);
      }
      if (err && refusal(err)) return { refused: err };
      throw await this.createFailed(rec, e);
    }
  }

  /** A create that failed on its edge: the record says why; the error names the sandbox. */
  async createFailed(rec: SandboxRecord, e: unknown): Promise<WarrenError> {
    const err = e instanceof WarrenError ? e : new WarrenError('internal', 'sandbox creation failed');
    // Only while it is being made: a delete that came meanwhile stays its end.
    const end = endNow('infra', `its create failed: ${err.message}`);
    if (await this.store.updateSandbox(rec.id, { state: 'failed', error: { code: err.code, message: err.message }, end }, { from: ['creating'] }))
      this.ended(rec, end);
    this.o.logger.warn('create failed', {
      id: rec.id,
      node: rec.node,
      error: String(e),
      cause: e instanceof Error && e.cause instanceof Error ? e.cause.message : undefined,
    });
    return new WarrenError(err.code, err.message, { ...err.details, id: rec.id });
  }
}
