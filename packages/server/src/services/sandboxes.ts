import type { Duplex } from 'node:stream';
import type { CreateSandboxRequest, KeyRole, ListSandboxesQuery, ListSandboxesResponse, NetworkPolicy, Sandbox } from '@warren/api';
import { WarrenError, memoryRequestOf } from '@warren/api';
import { compilePolicy, opensNetwork, type EdgeApi, type EdgeLease, type EdgeSandboxState } from '@warren/edge';
import type { ImageCatalogue } from '@warren/images';
import type { KeyRecord, SandboxEndRecord, SandboxRecord, Store, TenantUsage } from '../store/store.js';
import { newSandboxId } from './ids.js';
import type { Cluster } from '../cluster/cluster.js';
import { Placer } from '../placement/placer.js';
import { NodeView } from '../placement/node-view.js';
import { CapacityQueue } from '../placement/capacity-queue.js';
import { createWrites, type CreateWrites } from './create-writes.js';
import { SandboxEnds } from './sandbox-ends.js';
import type { Placement, PlacementRequest } from '../placement/policy.js';
import { NodeSync } from './node-sync.js';
import { RUNNING, decodeFiles, hasQuota, poolKey, sandboxView } from './sandbox-view.js';
import { edgeSpec, type DecodedFile } from '../placement/edge-spec.js';
import { LeaseBook } from '../placement/lease-book.js';
import { checkNetwork, namedCreate, resolveCreate, type Named, type ResolveParts, type ResolvedCreate } from './create-resolve.js';
import type { EventLog } from './events.js';
import { SandboxLists } from './sandbox-lists.js';
import { LiveRoutes } from './live-routes.js';

export { decodeFiles, hasQuota, poolKey, visibleImage } from './sandbox-view.js';
export type { DecodedFile } from '../placement/edge-spec.js';

/** A create's request checked and resolved (see SandboxService.prepare). */
interface Made {
  backend: SandboxRecord['backend'];
  layers: string[];
  resources: SandboxRecord['resources'];
  network: NetworkPolicy;
  imageEnv: Record<string, string>;
  want: PlacementRequest;
  /** The lease the sandbox lives under (null: none). */
  lease: EdgeLease | null;
  now: number;
}

/** No node can take a create: why, per node. */
const noNode = (refused: Record<string, string>, m: Pick<Made, 'resources' | 'backend'>): WarrenError =>
  new WarrenError('resource_exhausted', 'no node can take this sandbox now', { nodes: refused, requested: m.resources, backend: m.backend });

export interface SandboxServiceOptions {
  defaultTtlSeconds: number;
  /** The backend of a create that names none. */
  defaultBackend?: 'container' | 'microvm' | 'vm';
  /** diskMiB: a sandbox's writable layer when it asks for no limit; null on a node without disk quotas. */
  defaults: { cpu: number; memoryMiB: number; pids: number; diskMiB: number | null };
  logger: { info(msg: string, meta?: unknown): void; warn(msg: string, meta?: unknown): void };
  /** Named steps where a fault-injection test crashes the process (see WarrenOptions.crashAt). */
  failpoint?: (step: string) => void;
  /** Named steps where a test holds a create (see WarrenOptions.holdAt). */
  holdAt?: (step: string) => Promise<void> | undefined;
  /** The lifecycle's clock (creation, TTLs, activity; default Date.now): tests advance their own. */
  now?: () => number;
  /** How long a create may take on a node before it is tried on the next one (ms; default 120,000). */
  createTimeoutMs?: number;
  /** How long a list waits for a node's live state before showing its sandboxes as recorded (ms; default 3000). */
  listTimeoutMs?: number;
}

export interface Caller {
  tenant: string;
  role: KeyRole;
  quota: KeyRecord['quota'];
  /** Names the key in the audit log. */
  keyId: string;
  /** An edge presenting the cluster's join token: it may join, send heartbeats and read blobs, nothing else. */
  node?: true;
}

/** The control plane's view of sandboxes: records in the store, lifecycle on each one's node's edge. */
export class SandboxService {
  /** Warm pools, when the node keeps them (set once at start). */
  pools: {
    claim(key: string): Promise<{ id: string; node: string } | null>;
    claimed(): void;
    /** Whether there is any pool (a batch's creates then go one by one: each may claim). */
    any(): boolean;
    held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number };
  } | null = null;
  /** Starts recorded sandboxes on their nodes (placements and retries counted there, for /metrics). */
  readonly placer: Placer;
  /** The active leases this replica knows, as a create's spec carries them. */
  readonly leases = new LeaseBook();
  /** The nodes as placement sees them (one per replica). */
  readonly view: NodeView;
  /** Keeps the store and the nodes agreeing (reconcile, cut-off creates, activity). */
  readonly sync: NodeSync;
  /** Creates waiting for room (`schedule.waitSeconds`): told when room may have freed up. */
  readonly queue = new CapacityQueue();
  /** Lifecycle events (set once at start). */
  events: EventLog | null = null;
  /** The FnCall service: the workers made for a tenant's calls count in its quota. */
  fn: { held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } } | null = null;
  /** Creates' records written and marked running in group writes. */
  private readonly writes: CreateWrites;
  /** Lists: records from the store, their live state from their nodes. */
  private readonly lists: SandboxLists;
  /** Deletes, expiries and deaths: the end recorded, then the sandbox removed from its node. */
  private readonly ends: SandboxEnds;
  /** What resolving a create's request reads: the catalogue, the nodes' networking, the defaults. */
  private readonly resolveParts: ResolveParts;
  /** Where live sandboxes are, as this replica last read them: commands and file calls go straight there. */
  private readonly routes: LiveRoutes;

  constructor(
    private readonly store: Store,
    /** The nodes: where a create goes, and the edge each sandbox is reached through. */
    private readonly cluster: Cluster,
    private readonly catalogue: ImageCatalogue,
    private readonly o: SandboxServiceOptions,
  ) {
    this.view = new NodeView(cluster);
    this.resolveParts = { catalogue, cluster, defaults: o.defaults };
    this.placer = new Placer(store, cluster, this.view, o, this.leases, (rec, end) => this.noteEnd(rec, end));
    this.lists = new SandboxLists(store, cluster, o);
    this.sync = new NodeSync(store, cluster, o, this.leases, (rec, end) => this.noteEnd(rec, end));
    this.writes = createWrites(store);
    this.routes = new LiveRoutes({ record: (caller, id) => this.record(caller, id), nodes: cluster });
    this.ends = new SandboxEnds(store, cluster, {
      logger: o.logger,
      failpoint: o.failpoint,
      freed: () => this.queue.poke(),
      ended: (rec, end) => this.noteEnd(rec, end),
      recorded: (id) => this.routes.forget(id),
    });
  }

  /**
   * Creates a sandbox, or answers the one an earlier create with the same requestId made.
   * `files`: the request's files already decoded (a batch decodes them once for all its creates).
   */
  async create(caller: Caller, request: CreateSandboxRequest, files: DecodedFile[] = decodeFiles(request)): Promise<Sandbox> {
    const req = await this.named(caller, request);
    const waitMs = (req.schedule?.waitSeconds ?? 0) * 1000;
    return waitMs > 0 ? this.queue.run(caller.tenant, waitMs, () => this.createNow(caller, req, files)) : this.createNow(caller, req, files);
  }

  /** The request with the image it starts from (see namedCreate). */
  named(caller: Caller, req: CreateSandboxRequest): Promise<Named> {
    return namedCreate(this.catalogue, caller, req);
  }

  private async createNow(caller: Caller, req: Named, files: DecodedFile[]): Promise<Sandbox> {
    const made = await this.make(caller, req, files);
    return made.live ? sandboxView(made.rec, made.live) : this.toApi(made.rec, false);
  }

  /**
   * Creates `count` sandboxes from one request at once (a batch, no requestId): the image is
   * resolved once, every sandbox placed before any is recorded (so they spread), all recorded in
   * one statement, started on their nodes side by side (each retried on the next node as a
   * single create is), and marked running in one statement. All-or-report: each one that failed
   * is in `errors`, and none is left behind. A caller with a quota takes the single-create path
   * for each (its quota counted create by create, as many as fit).
   */
  async createMany(
    caller: Caller,
    request: CreateSandboxRequest,
    count: number,
    files: DecodedFile[],
  ): Promise<{ sandboxes: Sandbox[]; errors: WarrenError[] }> {
    const settle = async <T>(ps: Array<Promise<T>>): Promise<{ ok: T[]; errors: WarrenError[] }> => {
      const ok: T[] = [];
      const errors: WarrenError[] = [];
      for (const r of await Promise.allSettled(ps))
        if (r.status === 'fulfilled') ok.push(r.value);
        else errors.push(r.reason instanceof WarrenError ? r.reason : new WarrenError('internal', 'create failed'));
      return { ok, errors };
    };
    let req: Named;
    try {
      req = await this.named(caller, request);
    } catch (e) {
      return { sandboxes: [], errors: Array.from({ length: count }, () => (e instanceof WarrenError ? e : new WarrenError('internal', 'create failed'))) };
    }
    const one = { ...req, requestId: undefined };
    if (hasQuota(caller.quota) || this.pools?.any() || req.schedule?.waitSeconds) {
      const r = await settle(Array.from({ length: count }, () => this.create(caller, one, files)));
      return { sandboxes: r.ok, errors: r.errors };
    }
    let made: Made;
    try {
      made = await this.prepare(caller, one);
    } catch (e) {
      return { sandboxes: [], errors: Array.from({ length: count }, () => (e instanceof WarrenError ? e : new WarrenError('internal', 'create failed'))) };
    }
    const errors: WarrenError[] = [];
    const placed: Array<{ rec: SandboxRecord; placement: Placement }> = [];
    for (let i = 0; i < count; i++) {
      const placement = this.view.place(made.want);
      const first = placement.order[0];
      if (first === undefined) errors.push(noNode(placement.refused, made));
      else {
        this.view.inFlightOn(first, made.resources, 1);
        placed.push({ rec: this.newRecord(caller, one, made, newSandboxId(made.now), first), placement });
      }
    }
    try {
      await this.store.insertSandboxes(placed.map((p) => p.rec));
    } catch (e) {
      for (const p of placed) this.view.inFlightOn(p.rec.node, made.resources, -1);
      throw e;
    }
    for (const p of placed) this.events?.sandbox(p.rec, 'created');
    this.o.failpoint?.('create:stored');
    const losses = this.cluster.losses;
    const outcomes = await this.placer.placeMany(placed, files);
    const started: Array<{ rec: SandboxRecord; live: EdgeSandboxState }> = [];
    outcomes.forEach((r, i) => {
      if (r.status === 'fulfilled') started.push({ rec: placed[i]!.rec, live: r.value });
      else errors.push(r.reason instanceof WarrenError ? r.reason : new WarrenError('internal', 'create failed'));
    });
    // A delete that came while they were being made wins (as for one create).
    const running = await this.markRunning(
      started.map((x) => x.rec),
      losses,
    );
    const sandboxes: Sandbox[] = [];
    for (const { rec, live } of started) {
      if (running.has(rec.id)) {
        this.events?.sandbox(rec, 'started');
        sandboxes.push(sandboxView(Object.assign({}, rec, { state: 'running' as const }), live));
      } else {
        await this.destroyOn(rec.node, rec.id);
        errors.push(new WarrenError('conflict', `sandbox ${rec.id} was deleted while it was being created`, { id: rec.id }));
      }
    }
    return { sandboxes, errors };
  }

  /**
   * Marks new sandboxes running in one store write (one whose end was recorded meanwhile stays
   * ended): the ids marked, each one's route learned (`losses`: Cluster.losses when they were placed).
   */
  async markRunning(recs: SandboxRecord[], losses: number): Promise<Set<string>> {
    return this.routes.started(
      recs,
      async () => new Set(await this.store.markStarted(recs.map((r) => r.id))),
      (ids, id) => ids.has(id),
      losses,
    );
  }

  /**
   * What a create asks for, checked and resolved once (a batch shares it): the backend, the
   * image's layers and env, resources and network, and what placement is asked.
   */
  private async prepare(caller: Caller, req: Named): Promise<Made> {
    const backend = req.backend ?? this.o.defaultBackend ?? 'container';
    if (!this.cluster.hasBackend(backend))
      throw new WarrenError('invalid_argument', `backend "${backend}" is not available on any node; use one of: ${[...this.cluster.backends()].join(', ')}`, {
        backend,
      });
    const [r, lease] = await Promise.all([this.resolve(caller, req), req.lease ? this.lease(caller, req.lease) : null]);
    const want = {
      backend,
      cpu: r.resources.cpu,
      memoryMiB: r.resources.memoryMiB,
      memoryRequestMiB: memoryRequestOf(r.resources),
      diskMiB: r.resources.diskMiB,
      network: opensNetwork(compilePolicy(r.network)),
      endpoints: r.network.endpoints,
    };
    return Object.assign({}, r, { backend, want, lease, now: (this.o.now ?? Date.now)() });
  }

  /** The caller's active lease of this id, kept in mind for the create's spec; not_found or conflict if it is not one. */
  async lease(caller: Caller, id: string): Promise<EdgeLease> {
    const l = await this.store.leases.get(id);
    // A sandbox and its lease are one tenant's (an admin's sandbox too: the lease's ends must find it).
    if (!l || l.tenant !== caller.tenant) throw new WarrenError('not_found', `lease ${id} does not exist`, { lease: id });
    if (l.state !== 'active' || l.remainingMs <= 0)
      throw new WarrenError('conflict', `lease ${id} has ${l.state === 'deleted' ? 'been deleted' : 'lapsed'}`, { lease: id });
    return this.leases.learn(l);
  }

  /** A new sandbox's record, `creating` on `node`. */
  private newRecord(caller: Caller, req: Named, m: Made, id: string, node: string): SandboxRecord {
    const ttl = req.lifetime?.ttlSeconds ?? this.o.defaultTtlSeconds;
    return {
      id,
      tenant: caller.tenant,
      node,
      state: 'creating',
      backend: m.backend,
      image: req.image,
      layers: m.layers,
      layerNames: req.layers ?? [],
      labels: req.labels ?? {},
      resources: m.resources,
      env: req.env ?? {},
      imageEnv: m.imageEnv,
      user: req.user ?? null,
      workdir: req.workdir ?? null,
      createdAt: m.now,
      expiresAt: m.now + ttl * 1000,
      lastActivityAt: m.now,
      idleTimeoutSeconds: req.lifetime?.idleTimeoutSeconds ?? null,
      pauseAfterIdleSeconds: req.lifetime?.pauseAfterIdleSeconds ?? null,
      ttlCountsPaused: req.lifetime?.ttlCountsPaused ?? false,
      error: null,
      requestId: req.requestId ?? null,
      network: m.network,
      lease: m.lease?.id ?? null,
    };
  }

  /** The record of a create, and the edge's state of the sandbox when this call made it (null for an earlier create's). */
  private async make(caller: Caller, req: Named, files: DecodedFile[]): Promise<{ rec: SandboxRecord; live: EdgeSandboxState | null }> {
    if (req.requestId) {
      const prev = await this.store.findByRequestId(caller.tenant, req.requestId);
      if (prev) return { rec: prev, live: null };
    }
    const made = await this.prepare(caller, req);
    const { resources } = made;
    // A warm pool of the same spec hands over one of its sandboxes: no admission, no start, and
    // no more of the quota (the pool's sandboxes count already), on the node that kept it.
    // No pool at all (most nodes, most of the time): no key to make, no claim to wait for.
    const claim = this.pools?.any() ? await this.pools.claim(poolKey(caller.tenant, made.layers, resources, made.network)) : null;
    const pooled = claim?.id ?? null;
    const placement: Placement = claim ? { order: [claim.node], refused: {}, complete: true, request: made.want } : this.view.place(made.want);
    const first = placement.order[0];
    if (first === undefined) throw noNode(placement.refused, made);
    const rec = this.newRecord(caller, req, made, pooled ?? newSandboxId(made.now), first);
    try {
      // The quota is checked where the record is written, in one transaction: creates of one
      // tenant at once cannot all pass it on the same count.
      const quota = caller.quota;
      // Counted on its node from the moment it is placed: the creates placed meanwhile see it.
      if (!pooled) this.view.inFlightOn(first, resources, 1);
      if (pooled || !hasQuota(quota)) await this.writes.insert(rec);
      else await this.store.insertSandbox(rec, { admit: (u) => this.fitQuota(caller.tenant, quota, resources, 1, u) });
    } catch (e) {
      if (!pooled) this.view.inFlightOn(first, resources, -1);
      if (e instanceof WarrenError && e.code === 'resource_exhausted') throw e;
      // A concurrent create with the same requestId won the race.
      const prev = req.requestId ? await this.store.findByRequestId(caller.tenant, req.requestId) : undefined;
      if (prev) return { rec: prev, live: null };
      throw e;
    }
    if (pooled) this.pools?.claimed();
    this.events?.sandbox(rec, 'created');
    this.o.failpoint?.('create:stored');
    const losses = this.cluster.losses;
    const held = this.o.holdAt?.('create:stored');
    if (held) await held;
    const live = pooled ? await this.claimPooled(rec, files) : await this.placer.place(rec, placement, files);
    const started = this.o.holdAt?.('create:started');
    if (started) await started;
    // A delete that came while the sandbox was being made wins: it must not live on unseen.
    const marked = await this.routes.started(
      [rec],
      () => this.writes.start(rec.id),
      (ok) => ok,
      losses,
    );
    if (!marked) {
      await this.destroyOn(rec.node, rec.id);
      throw new WarrenError('conflict', `sandbox ${rec.id} was deleted while it was being created`, { id: rec.id });
    }
    this.events?.sandbox(rec, 'started');
    return { rec: Object.assign({}, rec, { state: 'running' as const }), live };
  }

  /** Destroys a sandbox on its node, if the node answers (a node that is down removes it when it joins again). */
  async destroyOn(node: string, id: string): Promise<void> {
    try {
      await this.cluster.edge(node).destroy(id);
    } catch {
      // Down, or gone: its reconcile at the next join finds it.
    }
  }

  /** A pool's sandbox handed to its caller; on failure it is destroyed and its record failed. */
  private async claimPooled(rec: SandboxRecord, files: DecodedFile[]): Promise<EdgeSandboxState> {
    const edge = this.cluster.edge(rec.node);
    try {
      return await edge.claim(edgeSpec(rec, this.leases.of(rec.lease)), files);
    } catch (e) {
      await edge.destroy(rec.id).catch(() => undefined);
      throw await this.placer.createFailed(rec, e);
    }
  }

  /**
   * What a create (or a pool) asks for, resolved: the image's layers and the extra ones (last on
   * top), resources with the node's defaults, the network rules checked and normalised.
   */
  resolve(caller: Caller, req: Pick<Named, 'image' | 'layers' | 'resources' | 'network'>): Promise<ResolvedCreate> {
    return resolveCreate(this.resolveParts, caller, req);
  }

  /** New network rules for a running sandbox: new connections follow them at once. */
  /**
   * The new rules are stored before the node applies them (and put back if it cannot): a crash
   * in between makes the next start apply the new rules, never the older, looser ones.
   */
  async setNetwork(caller: Caller, id: string, policy: NetworkPolicy): Promise<SandboxRecord> {
    const rec = await this.live(caller, id);
    const network = checkNetwork(this.resolveParts, caller, policy);
    await this.store.updateSandbox(id, { network });
    this.o.failpoint?.('network:stored');
    try {
      await this.cluster.edge(rec.node).setNetwork(id, network);
    } catch (e) {
      await this.store.updateSandbox(id, { network: rec.network });
      throw e;
    }
    return { ...rec, network };
  }

  /**
   * Whether `count` more sandboxes of size `r` fit in a tenant's quota, counting its sandboxes,
   * what its warm pools keep and the FnCall workers made for its calls; resource_exhausted if not
   * (count 0: whether it is within).
   */
  async checkQuota(tenant: string, q: KeyRecord['quota'], r: { cpu: number; memoryMiB: number }, count = 1): Promise<void> {
    if (hasQuota(q)) this.fitQuota(tenant, q, r, count, await this.store.tenantUsage(tenant));
  }

  /** checkQuota's rule over the usage the store holds (`stored`) and the pools' and workers'. */
  fitQuota(tenant: string, q: KeyRecord['quota'], r: { cpu: number; memoryMiB: number }, count: number, stored: TenantUsage): void {
    const s = stored;
    const p = this.pools?.held(tenant) ?? { sandboxes: 0, cpu: 0, memoryMiB: 0 };
    const f = this.fn?.held(tenant) ?? { sandboxes: 0, cpu: 0, memoryMiB: 0 };
    const u = { sandboxes: s.sandboxes + p.sandboxes + f.sandboxes, cpu: s.cpu + p.cpu + f.cpu, memoryMiB: s.memoryMiB + p.memoryMiB + f.memoryMiB };
    if (
      (q.sandboxes !== undefined && u.sandboxes + count > q.sandboxes) ||
      (q.cpu !== undefined && u.cpu + count * r.cpu > q.cpu) ||
      (q.memoryMiB !== undefined && u.memoryMiB + count * r.memoryMiB > q.memoryMiB)
    ) {
      throw new WarrenError('resource_exhausted', `tenant "${tenant}" is over its quota`, { quota: q, usage: u, pools: p, fnWorkers: f });
    }
  }

  /** The caller's sandbox; not_found for other tenants' ids too. */
  async record(caller: Caller, id: string): Promise<SandboxRecord> {
    const rec = await this.store.getSandbox(id);
    if (!rec || (rec.tenant !== caller.tenant && caller.role !== 'admin')) throw new WarrenError('not_found', `sandbox ${id} does not exist`, { id });
    return rec;
  }

  /**
   * A sandbox the caller may run things in: running or paused by its record (the edge answers
   * conflict too when it is not live there).
   */
  live(caller: Caller, id: string): Promise<SandboxRecord> {
    return this.routes.live(caller, id);
  }

  /** Throws what `live` would, without a store read when this replica knows where the sandbox runs. */
  check(caller: Caller, id: string): Promise<void> {
    return this.routes.check(caller, id);
  }

  /** The default user of the caller's sandbox (null: the image's), without a store read when its route is known. */
  defaultUser(caller: Caller, id: string): Promise<string | null> {
    return this.routes.user(caller, id);
  }

  /**
   * Runs `call` on the edge of the caller's live sandbox: straight there when this replica knows
   * where it runs, a call that finds it gone answered as the store says (see LiveRoutes).
   */
  on<T>(caller: Caller, id: string, call: (sid: string, edge: EdgeApi) => Promise<T>): Promise<T> {
    return this.routes.on(caller, id, call);
  }

  /**
   * A sandbox the caller may run things in, and the edge it is reached through (unavailable
   * while its node is down).
   */
  async reach(caller: Caller, id: string): Promise<{ sid: string; edge: EdgeApi; rec: SandboxRecord }> {
    const rec = await this.live(caller, id);
    return { sid: rec.id, edge: this.cluster.edge(rec.node), rec };
  }

  /** One sandbox as the API shows it (`withUsage`: with CPU, memory and network counters read now). */
  async toApi(rec: SandboxRecord, withUsage = true): Promise<Sandbox> {
    const live = await this.liveStates([rec], withUsage);
    return sandboxView(rec, live.get(rec.id) ?? null);
  }

  /** The edges' live state of these sandboxes (see SandboxLists.liveStates). */
  private liveStates(recs: SandboxRecord[], usage = false): Promise<Map<string, EdgeSandboxState>> {
    return this.lists.liveStates(recs, usage);
  }

  /** A page of the caller's sandboxes (see SandboxLists). */
  list(caller: Caller, q: ListSandboxesQuery): Promise<ListSandboxesResponse> {
    return this.lists.list(caller, q);
  }

  /** A page of the caller's running and paused sandboxes, as E2B pages through them (see SandboxLists). */
  listLive(caller: Caller, q: { labels: Array<[string, string]>; order: 'asc' | 'desc'; from?: string; limit: number }): Promise<Sandbox[]> {
    return this.lists.listLive(caller, q);
  }

  /** Ends the caller's sandbox and removes it from its node (SandboxEnds); idempotent for one that already ended. */
  delete(caller: Caller, id: string, reason?: 'deleted' | 'lease'): Promise<void> {
    return this.ends.delete(caller, id, reason);
  }

  /** Called by the edge on every pause and resume (its own included): the store follows. */
  async stateChanged(id: string, s: { paused: boolean; expiresAtMs: number | null; reason?: 'memory' }): Promise<void> {
    await this.moved(id, s.paused, s.expiresAtMs, s.reason);
  }

  /**
   * Records a pause or a resume, and its event once: the write that changes the state wins (the
   * call's, or the edge's event on any of the replicas that read it). Only while it runs: an
   * event that comes after its end is recorded must not bring it back.
   */
  private async moved(id: string, paused: boolean, expiresAt?: number | null, reason?: 'memory'): Promise<void> {
    const patch = expiresAt === undefined ? {} : { expiresAt };
    if (await this.store.updateSandbox(id, { state: paused ? 'paused' : 'running', ...patch }, { from: [paused ? 'running' : 'paused'] })) {
      const rec = this.events ? await this.store.getSandbox(id) : undefined;
      if (rec) this.events?.sandbox(rec, paused ? 'paused' : 'resumed', undefined, reason);
    } else if (expiresAt !== undefined) await this.store.updateSandbox(id, patch, { from: RUNNING });
  }

  /** Called by the edge when a TTL or idle timeout passes. */
  expire(id: string, reason: 'ttl' | 'idle'): Promise<void> {
    return this.ends.expire(id, reason);
  }

  /** Called by the edge when a sandbox's processes died under it (the OOM killer's doing, or otherwise). */
  died(id: string, why?: { reason?: 'exited' | 'oom'; detail?: string }): Promise<void> {
    return this.ends.died(id, why);
  }

  /** The routes this replica keeps, the calls that went on one and those that read the store first (for /metrics). */
  get routing(): { routes: number; routed: number; read: number } {
    return { routes: this.routes.size, ...this.routes.counts };
  }

  /** Sandbox ends by reason on this replica since it started (for /metrics). */
  get ended(): ReadonlyMap<string, number> {
    return this.events?.ends ?? new Map();
  }

  /** An end recorded on any path (a delete, an expiry, a death, a node lost, a create that failed): told as an event, and counted. */
  noteEnd(rec: SandboxRecord, end: SandboxEndRecord): void {
    this.routes.forget(rec.id);
    this.events?.sandbox(rec, 'ended', end);
  }

  async setTimeout(caller: Caller, id: string, ttlSeconds: number): Promise<SandboxRecord> {
    const { edge, rec } = await this.reach(caller, id);
    const expiresAt = (this.o.now ?? Date.now)() + ttlSeconds * 1000;
    await edge.setExpiry(id, expiresAt);
    await this.store.updateSandbox(id, { expiresAt });
    return { ...rec, expiresAt };
  }

  async pause(caller: Caller, id: string): Promise<void> {
    await (await this.reach(caller, id)).edge.pause(id);
    await this.moved(id, true);
    this.queue.poke();
  }

  async resume(caller: Caller, id: string): Promise<void> {
    await (await this.reach(caller, id)).edge.resume(id);
    await this.moved(id, false);
  }

  /** Applies pause, resume or delete to every live sandbox of the caller with all these labels. */
  async batch(caller: Caller, op: 'pause' | 'resume' | 'delete', labels: Record<string, string>): Promise<number> {
    const all = await this.store.listSandboxes({ tenant: caller.tenant, labels: Object.entries(labels), limit: 100_000 });
    const live = await this.liveStates(all);
    const recs = all.filter((r) => live.has(r.id));
    let n = 0;
    for (let i = 0; i < recs.length; i += 16) {
      const results = await Promise.allSettled(
        recs.slice(i, i + 16).map((r) => (op === 'delete' ? this.delete(caller, r.id) : op === 'pause' ? this.pause(caller, r.id) : this.resume(caller, r.id))),
      );
      n += results.filter((x) => x.status === 'fulfilled').length;
    }
    return n;
  }

  /**
   * A connection to a port of the caller's sandbox, dialled by its node (EdgeApi.openPort): this
   * process never dials a node's addresses, which are the node's own (counts as activity).
   */
  async openPort(caller: Caller, id: string, port: number): Promise<{ sandbox: string; stream: Duplex }> {
    return this.on(caller, id, async (sid, edge) => ({ sandbox: sid, stream: await edge.openPort(sid, port) }));
  }
}
