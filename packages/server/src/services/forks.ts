import { randomBytes } from 'node:crypto';
import type { ForkRequest, ForkResponse } from '@warren/api';
import { WarrenError, memoryRequestOf } from '@warren/api';
import { checkedMemoryRequest } from './create-resolve.js';
import { compilePolicy, forkLayer, opensNetwork, type EdgeApi, type EdgeLease, type EdgeSandboxState } from '@warren/edge';
import type { SandboxRecord, Store } from '../store/store.js';
import type { Cluster } from '../cluster/cluster.js';
import { newSandboxId } from './ids.js';
import { edgeSpec } from '../placement/edge-spec.js';
import { sandboxView } from './sandbox-view.js';
import type { Caller, SandboxService } from './sandboxes.js';
import { checkLayersAlone, type ImageService } from './images.js';
import { within } from '../cluster/within.js';
import type { Placement } from '../placement/policy.js';

/** A child moved to another node: made there, or why not. */
type Moved = { rec: SandboxRecord; state: EdgeSandboxState } | { error: WarrenError };

/** How many fork bases a sandbox may stand on (forks of forks): each is one more overlay layer. */
export const MAX_FORK_DEPTH = 32;

/** How long a node has for a fork (its freeze and its children), in ms. */
export const FORK_TIMEOUT_MS = 300_000;

export interface ForkServiceOptions {
  defaultTtlSeconds: number;
  /** How long a node has for a fork (default FORK_TIMEOUT_MS). */
  timeoutMs?: number;
  now?: () => number;
}

/** A fork base's id (FORK_BASE_ID): `fb_` and 24 lowercase hex digits. */
export const newForkBaseId = (): string => `fb_${randomBytes(12).toString('hex')}`;

/**
 * The children of a fork as records (pure): the source's image, layers with the fork base's on
 * top, env, user, workdir, network, backend and node; the request's lifetime, labels (default
 * the source's), lease and resources (CPU and memory; default the source's).
 */
export function forkRecords(
  src: SandboxRecord,
  req: ForkRequest,
  o: { baseId: string; ids: string[]; now: number; defaultTtlSeconds: number; lease: string | null },
): SandboxRecord[] {
  const ttl = req.lifetime?.ttlSeconds ?? o.defaultTtlSeconds;
  const memoryMiB = req.resources?.memoryMiB ?? src.resources.memoryMiB;
  // A new limit with no request of its own takes the default share of it, not the source's request.
  const askedRequest = req.resources?.memoryRequestMiB ?? (req.resources?.memoryMiB === undefined ? src.resources.memoryRequestMiB : undefined);
  const resources = {
    ...src.resources,
    cpu: req.resources?.cpu ?? src.resources.cpu,
    memoryMiB,
    memoryRequestMiB: checkedMemoryRequest(memoryMiB, askedRequest),
  };
  return o.ids.map((id) => ({
    ...src,
    id,
    state: 'creating' as const,
    layers: [...src.layers, forkLayer(o.baseId)],
    labels: req.labels ?? src.labels,
    resources,
    createdAt: o.now,
    expiresAt: o.now + ttl * 1000,
    lastActivityAt: o.now,
    idleTimeoutSeconds: req.lifetime?.idleTimeoutSeconds ?? null,
    pauseAfterIdleSeconds: req.lifetime?.pauseAfterIdleSeconds ?? null,
    ttlCountsPaused: req.lifetime?.ttlCountsPaused ?? false,
    error: null,
    requestId: null,
    lease: o.lease,
    end: null,
  }));
}

/**
 * Forks: a sandbox's state frozen once on its node as a fork base, and `count` children made
 * there from it in one call to the node (EdgeApi.fork): recorded first (as a create is), started
 * side by side, marked running together; each one that could not be made (the node full) is
 * failed and reported, none left behind.
 */
export class ForkService {
  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    private readonly sandboxes: SandboxService,
    private readonly images: ImageService,
    private readonly o: ForkServiceOptions,
  ) {}

  /**
   * Children the source's node had no room for, made on other nodes: they stand on `alone` (the
   * source's layers with each fork base made an image layer there, which the node answered with
   * the fork), copied to the control plane's blob store (ImageService.gather) so any node reads
   * them; each child keeps its id, its record moved (while still `creating`) to its node and
   * layers, then placed as a batch's sandboxes are.
   */
  private async elsewhere(src: SandboxRecord, recs: SandboxRecord[], which: number[], alone: unknown): Promise<Map<number, Moved>> {
    const out = new Map<number, Moved>();
    const fail = async (i: number, e: unknown): Promise<void> => void out.set(i, { error: await this.sandboxes.placer.createFailed(recs[i]!, e) });
    const edge = this.cluster.edge(src.node);
    let layers: string[];
    try {
      layers = checkLayersAlone(recs[0]!.layers, alone);
      await this.images.gather(edge, layers);
    } catch (e) {
      for (const i of which) await fail(i, e);
      return out;
    }
    const r = recs[0]!;
    const want = {
      backend: r.backend,
      cpu: r.resources.cpu,
      memoryMiB: r.resources.memoryMiB,
      memoryRequestMiB: memoryRequestOf(r.resources),
      diskMiB: r.resources.diskMiB,
      network: opensNetwork(compilePolicy(r.network)),
      endpoints: r.network?.endpoints,
    };
    const view = this.sandboxes.view;
    const placed: Array<{ i: number; rec: SandboxRecord; placement: Placement }> = [];
    for (const i of which) {
      const placement = view.placeAll(want, new Set([src.node]));
      const first = placement.order[0];
      if (first === undefined) {
        await fail(i, new WarrenError('resource_exhausted', 'no node can take this fork now', { nodes: placement.refused }));
        continue;
      }
      // A child deleted meanwhile stays deleted (its record is no longer `creating`).
      if (!(await this.store.updateSandbox(recs[i]!.id, { node: first, layers }, { from: ['creating'] }))) {
        out.set(i, { error: new WarrenError('conflict', `sandbox ${recs[i]!.id} was deleted while it was being made`, { id: recs[i]!.id }) });
        continue;
      }
      view.inFlightOn(first, r.resources, 1);
      placed.push({ i, rec: { ...recs[i]!, layers, node: first }, placement });
    }
    const results = await this.sandboxes.placer.placeMany(placed, []);
    results.forEach((res, k) => {
      const p = placed[k]!;
      if (res.status === 'fulfilled') out.set(p.i, { rec: p.rec, state: res.value });
      else out.set(p.i, { error: res.reason instanceof WarrenError ? res.reason : new WarrenError('internal', 'the fork failed') });
    });
    return out;
  }

  async fork(caller: Caller, id: string, req: ForkRequest): Promise<ForkResponse> {
    const src = await this.sandboxes.live(caller, id);
    if (src.backend === 'vm')
      throw new WarrenError('invalid_argument', 'a full VM cannot be forked (containers and microVMs can)', { id, backend: src.backend });
    if (src.backend === 'microvm' && req.resources?.memoryMiB !== undefined && req.resources.memoryMiB !== src.resources.memoryMiB)
      throw new WarrenError('invalid_argument', 'a microVM’s forks have its memory: leave out resources.memoryMiB', { id, memoryMiB: src.resources.memoryMiB });
    // Each generation of forks stacks one more layer: past MAX_FORK_DEPTH, commit and start anew.
    if (src.layers.filter((l) => l.startsWith('fork:')).length >= MAX_FORK_DEPTH)
      throw new WarrenError(
        'invalid_argument',
        `a fork of a fork of … stands on at most ${MAX_FORK_DEPTH} fork bases: commit this one and create from the image`,
        {
          id,
          maxDepth: MAX_FORK_DEPTH,
        },
      );
    const count = req.count ?? 1;
    const now = (this.o.now ?? Date.now)();
    const lease: EdgeLease | null = req.lease ? await this.sandboxes.lease(caller, req.lease) : null;
    const baseId = newForkBaseId();
    const recs = forkRecords(src, req, {
      baseId,
      ids: Array.from({ length: count }, () => newSandboxId(now)),
      now,
      defaultTtlSeconds: this.o.defaultTtlSeconds,
      lease: lease?.id ?? null,
    });
    const resources = recs[0]!.resources;
    await this.sandboxes.checkQuota(caller.tenant, caller.quota, resources, count);
    const view = this.sandboxes.view;
    for (let i = 0; i < count; i++) view.inFlightOn(src.node, resources, 1);
    // Children the node has no room for may go elsewhere: a container's, in a cluster.
    const spread = src.backend === 'container' && this.cluster.up().length > 1;
    const edge = this.cluster.edge(src.node);
    let answer: Awaited<ReturnType<EdgeApi['fork']>>;
    let started: Promise<unknown> | null = null;
    const losses = this.cluster.losses;
    try {
      await this.store.insertSandboxes(recs);
      for (const r of recs) this.sandboxes.events?.sandbox(r, 'created');
      const forking = edge.fork(
        src.id,
        baseId,
        recs.map((r) => edgeSpec(r, this.sandboxes.leases.of(r.lease))),
        { alone: spread },
      );
      started = forking;
      answer = await within(this.o.timeoutMs ?? FORK_TIMEOUT_MS, `node ${src.node}`, forking, this.cluster.goneSignal(src.node));
      for (let i = 0; i < count; i++) view.inFlightOn(src.node, resources, -1, i === count - 1 ? answer.load : undefined);
    } catch (e) {
      for (let i = 0; i < count; i++) view.inFlightOn(src.node, resources, -1);
      // Given up on, the fork may still finish there: what it made is removed when it does.
      if (started && e instanceof WarrenError && e.code === 'unavailable') {
        const destroy = (): Promise<unknown> => Promise.allSettled(recs.map((r) => edge.destroy(r.id)));
        void started.then(destroy, destroy).catch(() => undefined);
      }
      // The source gone meanwhile (deleted, its node lost) is the caller's conflict, not the platform's fault.
      const gone = !(await this.sandboxes.live(caller, id).then(
        () => true,
        () => false,
      ));
      const err = gone
        ? new WarrenError('conflict', `sandbox ${id} ended while it was being forked`, { id })
        : e instanceof WarrenError
          ? e
          : new WarrenError('internal', 'the fork failed');
      await Promise.all(recs.map((r) => this.sandboxes.placer.createFailed(r, err).catch(() => undefined)));
      throw err;
    }
    const outcomes = answer.outcomes;
    // Those the source's node had no room for go to other nodes, standing on its bases as layers.
    const full = outcomes.flatMap((o, i) => ('error' in o && o.error.code === 'resource_exhausted' ? [i] : []));
    const moved = full.length && spread ? await this.elsewhere(src, recs, full, answer.alone) : new Map<number, Moved>();
    const errors: WarrenError[] = [];
    const made: Array<{ rec: SandboxRecord; state: EdgeSandboxState }> = [];
    for (const [i, o] of outcomes.entries()) {
      const m = moved.get(i);
      if (m && 'state' in m) made.push(m);
      else if (m) errors.push(m.error);
      else if ('state' in o) made.push({ rec: recs[i]!, state: o.state });
      else errors.push(await this.sandboxes.placer.createFailed(recs[i]!, new WarrenError(o.error.code, o.error.message, o.error.details)));
    }
    const running = await this.sandboxes.markRunning(
      made.map((m) => m.rec),
      losses,
    );
    const sandboxes = [];
    for (const { rec, state } of made) {
      if (running.has(rec.id)) {
        this.sandboxes.events?.sandbox(rec, 'started');
        sandboxes.push(sandboxView({ ...rec, state: 'running' }, state));
      } else {
        await this.sandboxes.destroyOn(rec.node, rec.id);
        errors.push(new WarrenError('conflict', `sandbox ${rec.id} was deleted while it was being made`, { id: rec.id }));
      }
    }
    if (sandboxes.length)
      this.sandboxes.events?.forked(
        src,
        sandboxes.map((s) => s.id),
      );
    return { source: src.id, sandboxes, errors: errors.map((e) => ({ code: e.code, message: e.message })) };
  }
}
