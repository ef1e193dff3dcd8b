import type { CreateSandboxRequest, Image, KeyRole, ListSandboxesQuery, ListSandboxesResponse, NetworkPolicy, Sandbox, SandboxState } from '@warren/api';
import { WarrenError, sandboxEnv } from '@warren/api';
import { compilePolicy, widestAllowPrefix, type CompiledPolicy, type EdgeApi, type EdgeSandboxSpec, type EdgeSandboxState } from '@warren/edge';
import type { ImageCatalogue } from '@warren/images';
import type { KeyRecord, SandboxRecord, Store, TenantUsage } from '../store/store.js';
import { newSandboxId } from './ids.js';
import type { Cluster } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';

export interface SandboxServiceOptions {
  defaultTtlSeconds: number;
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

/** An image the caller may use: every tenant's, its tenant's, or any for an admin; not_found otherwise. */
export async function visibleImage(catalogue: ImageCatalogue, caller: Caller, name: string): Promise<Image> {
  const img = await catalogue.getImage(name);
  if (!img || (img.tenant !== null && img.tenant !== caller.tenant && caller.role !== 'admin'))
    throw new WarrenError('not_found', `image "${name}" does not exist`, { image: name });
  return img;
}

/** A sandbox made ahead for nobody yet (a pool's, a FnCall worker): no env, user, workdir or lifetime. */
export function unclaimedSpec(id: string, layers: string[], resources: EdgeSandboxSpec['resources'], more: Partial<EdgeSandboxSpec> = {}): EdgeSandboxSpec {
  return {
    id,
    layers,
    resources,
    env: {},
    user: null,
    workdir: null,
    expiresAtMs: null,
    idleTimeoutMs: null,
    lastActivityMs: Date.now(),
    paused: false,
    ...more,
  };
}

/** What makes a pool's sandbox interchangeable with a new one: tenant, layers, resources, network. */
export function poolKey(tenant: string, layers: string[], resources: SandboxRecord['resources'], network: NetworkPolicy): string {
  const n = { egress: network.egress ?? 'deny', allow: [...(network.allow ?? [])].sort(), deny: [...(network.deny ?? [])].sort() };
  return JSON.stringify([tenant, layers, resources.cpu, resources.memoryMiB, resources.pids, resources.diskMiB, n]);
}

/** A file given at create, decoded. */
export interface DecodedFile {
  path: string;
  content: Buffer;
  mode?: number;
}

/** The files of a create request, decoded from base64 (once per request: a batch shares them). */
export function decodeFiles(req: Pick<CreateSandboxRequest, 'files'>): DecodedFile[] {
  return (req.files ?? []).map((f) => ({ path: f.path, content: Buffer.from(f.content, 'base64'), mode: f.mode }));
}

const EMPTY_NET_USAGE = { bytesIn: 0, bytesOut: 0, connectionsAllowed: 0, connectionsDenied: 0, allowed: {}, denied: {} };

/** Whether a key's quota limits anything (a key without one is never counted). */
export const hasQuota = (q: KeyRecord['quota']): boolean => q.sandboxes !== undefined || q.cpu !== undefined || q.memoryMiB !== undefined;

/** Whether network rules let a sandbox reach beyond loopback. */
function opensNetwork(c: CompiledPolicy): boolean {
  return c.egress === 'allow' || c.allowNames.size > 0 || c.allowSuffixes.length > 0 || c.allowCidrs.length > 0;
}

/** The states a running sandbox's pause and resume move between. */
const RUNNING: SandboxState[] = ['running', 'paused'];
const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** The control plane's view of sandboxes: records in the store, lifecycle on each one's node's edge. */
export class SandboxService {
  /** Warm pools, when the node keeps them (set once at start). */
  pools: { claim(key: string): Promise<string | null>; held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } } | null = null;
  /** Creates placed, and the tries on another node after an edge refused or did not answer (for /metrics). */
  readonly placements = { created: 0, retried: 0 };
  /** The FnCall service: the workers made for a tenant's calls count in its quota. */
  fn: { held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } } | null = null;

  constructor(
    private readonly store: Store,
    /** The nodes: where a create goes, and the edge each sandbox is reached through. */
    private readonly cluster: Cluster,
    private readonly catalogue: ImageCatalogue,
    private readonly o: SandboxServiceOptions,
  ) {}

  /**
   * Creates a sandbox, or answers the one an earlier create with the same requestId made.
   * `files`: the request's files already decoded (a batch decodes them once for all its creates).
   */
  async create(caller: Caller, req: CreateSandboxRequest, files: DecodedFile[] = decodeFiles(req)): Promise<Sandbox> {
    const made = await this.make(caller, req, files);
    return made.live ? this.view(made.rec, made.live) : this.toApi(made.rec, false);
  }

  /** The record of a create, and the edge's state of the sandbox when this call made it (null for an earlier create's). */
  private async make(caller: Caller, req: CreateSandboxRequest, files: DecodedFile[]): Promise<{ rec: SandboxRecord; live: EdgeSandboxState | null }> {
    if (req.requestId) {
      const prev = await this.store.findByRequestId(caller.tenant, req.requestId);
      if (prev) return { rec: prev, live: null };
    }
    const backend = req.backend ?? 'container';
    const backends = this.cluster.backends();
    if (!backends.has(backend))
      throw new WarrenError('invalid_argument', `backend "${backend}" is not available on any node; use one of: ${[...backends].join(', ')}`, { backend });
    const { network, layers, resources, imageEnv } = await this.resolve(caller, req);
    // A warm pool of the same spec hands over one of its sandboxes: no admission, no start, and
    // no more of the quota (the pool's sandboxes count already). Pools are on the local node.
    const pooled = (await this.pools?.claim(poolKey(caller.tenant, layers, resources, network))) ?? null;
    const placement = pooled
      ? { order: [this.cluster.up().find((n) => n.local)?.id ?? ''], refused: {} }
      : this.cluster.place({
          backend,
          cpu: resources.cpu,
          memoryMiB: resources.memoryMiB,
          diskMiB: resources.diskMiB,
          network: opensNetwork(compilePolicy(network)),
        });
    const first = placement.order[0];
    if (first === undefined)
      throw new WarrenError('resource_exhausted', 'no node can take this sandbox now', { nodes: placement.refused, requested: resources, backend });
    const now = (this.o.now ?? Date.now)();
    const ttl = req.lifetime?.ttlSeconds ?? this.o.defaultTtlSeconds;
    const rec: SandboxRecord = {
      id: pooled ?? newSandboxId(now),
      tenant: caller.tenant,
      node: first,
      state: 'creating',
      backend,
      image: req.image,
      layers,
      layerNames: req.layers ?? [],
      labels: req.labels ?? {},
      resources,
      env: req.env ?? {},
      imageEnv,
      user: req.user ?? null,
      workdir: req.workdir ?? null,
      createdAt: now,
      expiresAt: now + ttl * 1000,
      lastActivityAt: now,
      idleTimeoutSeconds: req.lifetime?.idleTimeoutSeconds ?? null,
      pauseAfterIdleSeconds: req.lifetime?.pauseAfterIdleSeconds ?? null,
      ttlCountsPaused: req.lifetime?.ttlCountsPaused ?? false,
      error: null,
      requestId: req.requestId ?? null,
      network,
    };
    try {
      // The quota is checked where the record is written, in one transaction: creates of one
      // tenant at once cannot all pass it on the same count.
      const quota = caller.quota;
      await this.store.insertSandbox(rec, pooled || !hasQuota(quota) ? {} : { admit: (u) => this.fitQuota(caller.tenant, quota, resources, 1, u) });
    } catch (e) {
      if (e instanceof WarrenError && e.code === 'resource_exhausted') throw e;
      // A concurrent create with the same requestId won the race.
      const prev = req.requestId ? await this.store.findByRequestId(caller.tenant, req.requestId) : undefined;
      if (prev) return { rec: prev, live: null };
      throw e;
    }
    this.o.failpoint?.('create:stored');
    const held = this.o.holdAt?.('create:stored');
    if (held) await held;
    const live = pooled ? await this.claimPooled(rec, files) : await this.place(rec, placement, files);
    // A delete that came while the sandbox was being made wins: it must not live on unseen.
    if (!(await this.store.updateSandbox(rec.id, { state: 'running' }, { from: ['creating'] }))) {
      await this.cluster
        .edge(rec.node)
        .destroy(rec.id)
        .catch(() => undefined);
      throw new WarrenError('conflict', `sandbox ${rec.id} was deleted while it was being created`, { id: rec.id });
    }
    return { rec: { ...rec, state: 'running' }, live };
  }

  /** A pool's sandbox handed to its caller; on failure it is destroyed and its record failed. */
  private async claimPooled(rec: SandboxRecord, files: DecodedFile[]): Promise<EdgeSandboxState> {
    const edge = this.cluster.edge(rec.node);
    try {
      return await edge.claim(this.edgeSpec(rec), files);
    } catch (e) {
      await edge.destroy(rec.id).catch(() => undefined);
      throw await this.createFailed(rec, e);
    }
  }

  /**
   * Starts a recorded sandbox on the placement's nodes in turn (`rec.node` is the first): an
   * edge that refuses (its own, fresher view says it is full) or cannot be reached passes it to
   * the next, the record following it there. When every node refused, the record goes (a
   * sandbox no node had room for never was) and the error says why per node.
   */
  private async place(rec: SandboxRecord, placement: { order: string[]; refused: Record<string, string> }, files: DecodedFile[]): Promise<EdgeSandboxState> {
    const refused: Record<string, string> = { ...placement.refused };
    let last: WarrenError | null = null;
    for (const [i, node] of placement.order.entries()) {
      if (i > 0) this.placements.retried++;
      if (i > 0 && !(await this.store.updateSandbox(rec.id, { node }, { from: ['creating'] })))
        throw new WarrenError('conflict', `sandbox ${rec.id} was deleted while it was being created`, { id: rec.id });
      rec.node = node;
      this.cluster.placedOn(node, rec.resources, 1);
      let started: Promise<EdgeSandboxState> | null = null;
      let edge: EdgeApi | null = null;
      try {
        edge = this.cluster.edge(node);
        started = edge.create(this.edgeSpec(rec), files);
        // A node that stops answering (or goes down) meanwhile passes the create on.
        const live = await within(this.o.createTimeoutMs ?? 120_000, `node ${node}`, started, this.cluster.goneSignal(node));
        this.placements.created++;
        this.o.failpoint?.('create:started');
        return live;
      } catch (e) {
        this.cluster.placedOn(node, rec.resources, -1);
        const err = e instanceof WarrenError ? e : null;
        // The edge admits a create before it starts anything (one call, not a check and then a
        // create): a refused one left nothing there. One given up on may still finish there: it
        // is destroyed there when it does (and a node that went down removes it when it joins again).
        if (err?.code === 'unavailable' && started && edge) {
          const there = edge;
          const destroy = (): Promise<void> => there.destroy(rec.id);
          void started.then(destroy, destroy).catch(() => undefined);
        }
        if (err?.code !== 'resource_exhausted' && (err?.code !== 'unavailable' || err.details.id !== undefined)) throw await this.createFailed(rec, e);
        refused[node] = err.message;
        last = err;
      }
    }
    await this.store.deleteSandbox(rec.id);
    // One node (warren up): its own error, as it said it.
    if (placement.order.length === 1 && Object.keys(placement.refused).length === 0 && last) throw last;
    throw new WarrenError('resource_exhausted', 'no node can take this sandbox now', { nodes: refused, requested: rec.resources, backend: rec.backend });
  }

  /** A create that failed on its edge: the record says why; the error names the sandbox. */
  private async createFailed(rec: SandboxRecord, e: unknown): Promise<WarrenError> {
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

  /**
   * What a create (or a pool) asks for, resolved: the image's layers and the extra ones (last on
   * top), resources with the node's defaults, the network rules checked and normalised.
   */
  async resolve(
    caller: Caller,
    req: Pick<CreateSandboxRequest, 'image' | 'layers' | 'resources' | 'network'>,
  ): Promise<{ layers: string[]; resources: SandboxRecord['resources']; network: NetworkPolicy; imageEnv: Record<string, string> }> {
    const network = this.checkNetwork(caller, req.network);
    const image = await visibleImage(this.catalogue, caller, req.image);
    const extra: string[] = [];
    for (const ref of req.layers ?? []) {
      const digest = await this.catalogue.resolveLayer(ref, caller.role === 'admin' ? undefined : caller.tenant);
      if (!digest) throw new WarrenError('not_found', `layer "${ref}" does not exist`, { layer: ref });
      extra.push(digest);
    }
    const r = req.resources ?? {};
    // Fail closed: a limit this node cannot enforce is refused, never recorded and ignored.
    if (r.diskMiB !== undefined && this.o.defaults.diskMiB === null)
      throw new WarrenError(
        'invalid_argument',
        'resources.diskMiB cannot be enforced on this node (no disk quotas on its sandboxes’ file system); leave it out',
        {
          diskMiB: r.diskMiB,
        },
      );
    const resources = {
      cpu: r.cpu ?? this.o.defaults.cpu,
      memoryMiB: r.memoryMiB ?? this.o.defaults.memoryMiB,
      pids: r.pids ?? this.o.defaults.pids,
      diskMiB: r.diskMiB ?? this.o.defaults.diskMiB,
    };
    return { layers: [...image.layers, ...extra], resources, network, imageEnv: image.env };
  }

  /**
   * Rules a sandbox may have: they parse (the schema checked each entry), the node can honour
   * them, and the caller may open the CIDRs they name.
   */
  private checkNetwork(caller: Caller, policy: NetworkPolicy | undefined): NetworkPolicy {
    const p = policy ?? { egress: 'deny' };
    const compiled = compilePolicy(p);
    if (opensNetwork(compiled) && !this.cluster.networking())
      throw new WarrenError('invalid_argument', 'sandboxes on this node have loopback only (it runs without sandbox networking)', { network: p });
    const widest = widestAllowPrefix(compiled);
    const min = caller.role === 'admin' ? 0 : (caller.quota.cidrMinPrefix ?? 16);
    if (widest !== null && widest < min) {
      throw new WarrenError('permission_denied', `this key may allow CIDRs of /${min} or narrower; the rules ask for a /${widest}`, {
        network: p,
        cidrMinPrefix: min,
      });
    }
    return { egress: compiled.source.egress, allow: compiled.source.allow, deny: compiled.source.deny };
  }

  /** New network rules for a running sandbox: new connections follow them at once. */
  /**
   * The new rules are stored before the node applies them (and put back if it cannot): a crash
   * in between makes the next start apply the new rules, never the older, looser ones.
   */
  async setNetwork(caller: Caller, id: string, policy: NetworkPolicy): Promise<SandboxRecord> {
    const rec = await this.live(caller, id);
    const network = this.checkNetwork(caller, policy);
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

  private edgeSpec(rec: SandboxRecord): EdgeSandboxSpec {
    return {
      id: rec.id,
      layers: rec.layers,
      resources: { cpu: rec.resources.cpu, memoryMiB: rec.resources.memoryMiB, pids: rec.resources.pids, diskMiB: rec.resources.diskMiB },
      env: sandboxEnv(rec.imageEnv, rec.env),
      user: rec.user,
      workdir: rec.workdir,
      expiresAtMs: rec.expiresAt,
      idleTimeoutMs: rec.idleTimeoutSeconds === null ? null : rec.idleTimeoutSeconds * 1000,
      lastActivityMs: rec.lastActivityAt,
      paused: rec.state === 'paused',
      network: rec.network,
      pauseAfterIdleMs: rec.pauseAfterIdleSeconds == null ? null : rec.pauseAfterIdleSeconds * 1000,
      ttlCountsPaused: rec.ttlCountsPaused ?? false,
      tenant: rec.tenant,
      backend: rec.backend,
    };
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
  async live(caller: Caller, id: string): Promise<SandboxRecord> {
    const rec = await this.record(caller, id);
    if (rec.state !== 'running' && rec.state !== 'paused') throw new WarrenError('conflict', `sandbox ${id} is ${rec.state}`, { id, state: rec.state });
    return rec;
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
    return this.view(rec, live.get(rec.id) ?? null);
  }

  /**
   * The edges' live state of these sandboxes, one call per node; a node that is down or does
   * not answer leaves its sandboxes as their records say (a list never fails for one node).
   */
  private async liveStates(recs: SandboxRecord[], usage = false): Promise<Map<string, EdgeSandboxState>> {
    const byNode = new Map<string, string[]>();
    for (const r of recs) {
      if (r.state !== 'running' && r.state !== 'paused' && r.state !== 'creating') continue;
      const ids = byNode.get(r.node) ?? [];
      ids.push(r.id);
      byNode.set(r.node, ids);
    }
    const out = new Map<string, EdgeSandboxState>();
    await Promise.all(
      [...byNode].map(async ([node, ids]) => {
        try {
          const edge = this.cluster.edge(node);
          for (const st of await within(this.o.listTimeoutMs ?? 3000, `node ${node}`, edge.sandboxes({ ids, usage }), this.cluster.goneSignal(node)))
            out.set(st.id, st);
        } catch (e) {
          if (!(e instanceof WarrenError) || (e.code !== 'unavailable' && e.code !== 'not_found')) throw e;
        }
      }),
    );
    return out;
  }

  /** A sandbox record and the edge's live state of it (null: not live) as the API shows it. */
  private view(rec: SandboxRecord, live: EdgeSandboxState | null): Sandbox {
    const state = live ? (live.paused ? 'paused' : 'running') : rec.state;
    const none = { cpuSeconds: 0, cpuRecent: 0, memoryBytes: 0, swapBytes: 0, idleSeconds: 0 };
    const st = live?.usage ?? null;
    const usage = st
      ? { cpuSeconds: st.cpuSeconds, cpuRecent: st.cpuRecent, memoryBytes: st.memoryBytes, swapBytes: st.swapBytes, idleSeconds: Math.round(st.idleSeconds) }
      : none;
    // The create answer skips usage reads, as for CPU and memory: nothing has happened yet.
    const net = live?.network ?? null;
    const policy = net?.policy ?? { egress: rec.network?.egress ?? 'deny', allow: rec.network?.allow ?? [], deny: rec.network?.deny ?? [] };
    const network = { ...policy, address: net?.address ?? null, usage: net?.usage ?? EMPTY_NET_USAGE };
    const s: Sandbox = {
      id: rec.id,
      state,
      backend: rec.backend,
      image: rec.image,
      layers: rec.layerNames,
      node: rec.node,
      labels: rec.labels,
      resources: rec.resources,
      user: rec.user,
      workdir: rec.workdir,
      createdAt: new Date(rec.createdAt).toISOString(),
      // The edge's, while it runs: a resume moves it before the store has heard.
      expiresAt: iso(live ? live.expiresAtMs : rec.expiresAt),
      lastActivityAt: new Date(live?.lastActivityMs ?? rec.lastActivityAt).toISOString(),
      idleTimeoutSeconds: rec.idleTimeoutSeconds,
      pauseAfterIdleSeconds: rec.pauseAfterIdleSeconds ?? null,
      usage,
      network,
    };
    if (rec.error) s.error = rec.error;
    return s;
  }

  async list(caller: Caller, q: ListSandboxesQuery): Promise<ListSandboxesResponse> {
    const limit = q.limit ?? 100;
    const labels = (q.label ?? []).map((l) => {
      const i = l.indexOf('=');
      return [l.slice(0, i), l.slice(i + 1)] as [string, string];
    });
    let after: string | undefined;
    if (q.cursor) {
      after = Buffer.from(q.cursor, 'base64url').toString();
      if (!/^sb_[0-9a-z]+$/.test(after)) throw new WarrenError('invalid_argument', 'bad cursor');
    }
    // Live state comes from the edge, so a state filter on running/paused is applied after reading.
    const derived = q.state === 'running' || q.state === 'paused';
    const rows = await this.store.listSandboxes({
      tenant: caller.tenant,
      labels,
      state: derived ? undefined : q.state,
      limit: derived ? 10_000 : limit + 1,
      after,
    });
    // Which rows are live, and how (one call per node); then their usage for the page only (another).
    const live = await this.liveStates(rows);
    const page: SandboxRecord[] = [];
    let more = false;
    for (const r of rows) {
      const st = live.get(r.id);
      if (q.state && (st ? (st.paused ? 'paused' : 'running') : r.state) !== q.state) continue;
      if (page.length === limit) {
        more = true;
        break;
      }
      page.push(r);
    }
    const used = await this.liveStates(page, true);
    const out = page.map((r) => this.view(r, used.get(r.id) ?? null));
    const last = out[out.length - 1];
    return { sandboxes: out, nextCursor: more && last ? Buffer.from(last.id).toString('base64url') : null };
  }

  /** Stops and removes a sandbox; idempotent for sandboxes that already ended. */
  async delete(caller: Caller, id: string): Promise<void> {
    const rec = await this.record(caller, id);
    await this.stop(rec.id, 'stopped');
  }

  /**
   * Records the end first, then stops the sandbox: a crash in between leaves a record that no
   * restart takes back (only live states are adopted; what is left of it is removed then).
   */
  private async stop(id: string, state: 'stopped' | 'failed', error: SandboxRecord['error'] = null): Promise<void> {
    await this.remove(id, await this.recordEnd(id, state, error));
  }

  /** The record of a sandbox that ends, ended (what it was before). */
  private async recordEnd(id: string, state: 'stopped' | 'failed', error: SandboxRecord['error']): Promise<SandboxRecord | undefined> {
    const rec = await this.store.getSandbox(id);
    if (rec) await this.store.updateSandbox(id, { state, error }, { from: ['creating', 'running', 'paused'] });
    this.o.failpoint?.('delete:stored');
    return rec;
  }

  /**
   * Removes what is left of a sandbox whose end is recorded, keeping its last activity time. On
   * a node that is down nothing can be: its reconcile removes it when the node joins again.
   */
  private async remove(id: string, rec: SandboxRecord | undefined): Promise<void> {
    // A sandbox still being made is the create's to remove (it sees the record has ended).
    if (rec && this.cluster.up().some((n) => n.id === rec.node)) {
      const edge = this.cluster.edge(rec.node);
      const [live] = await edge.sandboxes({ ids: [id] });
      if (live) {
        if (rec.lastActivityAt !== live.lastActivityMs) await this.store.updateSandbox(id, { lastActivityAt: live.lastActivityMs });
        await edge.destroy(id);
      }
    }
    await this.store.deleteExecRequests(id);
  }

  /**
   * An edge's event ends a sandbox: resolves once the end is recorded; its removal goes on
   * meanwhile (a burst of expiries is removed side by side, not one after another).
   */
  private async ended(id: string, state: 'stopped' | 'failed', error: SandboxRecord['error'], what: string): Promise<void> {
    const warn = (e: unknown): void => this.o.logger.warn(what, { id, error: String(e) });
    const rec = await this.recordEnd(id, state, error).catch((e: unknown) => {
      warn(e);
      return undefined;
    });
    void this.remove(id, rec).catch(warn);
  }

  /** Called by the edge on every pause and resume (its own included): the store follows. */
  async stateChanged(id: string, s: { paused: boolean; expiresAtMs: number | null }): Promise<void> {
    // Only while it runs: an event that comes after its end is recorded must not bring it back.
    await this.store.updateSandbox(id, { state: s.paused ? 'paused' : 'running', expiresAt: s.expiresAtMs }, { from: RUNNING });
  }

  /** Called by the edge when a TTL or idle timeout passes. */
  expire(id: string, reason: 'ttl' | 'idle'): Promise<void> {
    this.o.logger.info('sandbox expired', { id, reason });
    return this.ended(id, 'stopped', null, 'expire failed');
  }

  /** Called by the edge when a sandbox's processes died under it. */
  died(id: string): Promise<void> {
    return this.ended(
      id,
      'failed',
      { code: 'unavailable', message: 'the sandbox stopped on its own (its init exited or was killed, e.g. out of memory)' },
      'cleanup of a dead sandbox failed',
    );
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
    await this.store.updateSandbox(id, { state: 'paused' }, { from: RUNNING });
  }

  async resume(caller: Caller, id: string): Promise<void> {
    await (await this.reach(caller, id)).edge.resume(id);
    await this.store.updateSandbox(id, { state: 'running' }, { from: RUNNING });
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
    const one = async (rec: SandboxRecord): Promise<void> => {
      if (held.has(rec.id) && rec.state !== 'creating') {
        kept++;
        return;
      }
      const ok =
        rec.state !== 'creating' &&
        (await edge.adopt(this.edgeSpec(rec)).catch((e: unknown) => {
          this.o.logger.warn('could not take back a sandbox', { id: rec.id, error: String(e) });
          return false;
        }));
      if (ok) {
        await this.store.updateSandbox(rec.id, { state: 'running' }, { from: RUNNING });
        adopted++;
      } else {
        await edge.destroy(rec.id).catch(() => undefined);
        await this.store.updateSandbox(rec.id, { state: 'failed', error: { code: 'unavailable', message: 'the sandbox ended while its node was away' } });
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
    const now = (this.o.now ?? Date.now)();
    const ended: string[] = [];
    for (const rec of await this.store.staleCreating(now - olderThanMs, 1000)) {
      const error = { code: 'unavailable', message: 'its create was cut off (the control plane making it stopped)' };
      if (!(await this.store.updateSandbox(rec.id, { state: 'failed', error }, { from: ['creating'] }))) continue;
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
   * the last flush (the edge keeps track), one write each; cheap at any count. Called periodically.
   */
  async flushActivity(): Promise<void> {
    for (const n of this.cluster.up())
      for (const { id, lastActivityMs: t } of await n.api.sandboxes({ touched: true })) await this.store.updateSandbox(id, { lastActivityAt: t });
  }

  /** Where the node reaches a port of the caller's sandbox (its address; counts as activity). */
  async portAddress(caller: Caller, id: string): Promise<string> {
    const { sid, edge } = await this.reach(caller, id);
    const host = await edge.portAddress(sid);
    if (!host) throw new WarrenError('invalid_argument', 'this sandbox has loopback only: nothing can reach its ports', { id: sid });
    return host;
  }
}
