import { WarrenError, type CreatePoolRequest, type Pool } from '@warren/api';
import type { EdgeLoad, EdgePoolSpec } from '@warren/edge';
import type { Cluster } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';
import { poolNodes, poolShares } from '../placement/pool-shares.js';
import type { PoolRecord, Store } from '../store/store.js';
import { newSandboxId } from './ids.js';
import { poolKey, type Caller, type SandboxService } from './sandboxes.js';
import { viewResources } from './sandbox-view.js';

export interface PoolServiceOptions {
  logger: { warn(msg: string, meta?: unknown): void };
  /** How often the pools are read from the store and the nodes told their shares (default 1000 ms). */
  syncEveryMs?: number;
}

/** What this replica saw of a pool's claims. */
interface Claims {
  claims: number;
  /** Times of recent claims (for claims per second). */
  recent: number[];
}

/**
 * Warm pools: sandboxes of one spec made ahead, never on a request's path. A pool is a record in
 * the store; its members are the nodes' (edge/src/lifecycle/pool-members.ts): each node keeps
 * its share of the pool's size ready, made under its own admission, and hands one over when a
 * matching create claims it. Every replica reads the pools from the store and tells each node
 * its shares (the same from any replica); a node lost, its shares move to the others.
 */
export class PoolService {
  private pools = new Map<string, PoolRecord>();
  /** Each record's poolKey (records are replaced, not changed, when the pools are read again). */
  private readonly keys = new WeakMap<PoolRecord, string>();
  private readonly claims = new Map<string, Claims>();
  /** Why a pool may not refill now (its tenant's quota), by pool id. */
  private readonly refused = new Map<string, string>();
  /** What each node (by boot) was told last, and when. */
  private readonly told = new Map<string, { what: string; at: number }>();
  private timer: NodeJS.Timeout | null = null;
  private syncing: Promise<void> | null = null;
  /** The sync asked for that has not started yet, and whether a caller it serves asked for `now`, or for a read of the store. */
  private syncQueued: Promise<void> | null = null;
  private queuedNow = false;
  private queuedReread = false;
  /** Whether the run under way reads the pools from the store. */
  private rereading = false;

  constructor(
    private readonly store: Store,
    private readonly cluster: Pick<Cluster, 'up' | 'loadOf'>,
    private readonly sandboxes: SandboxService,
    private readonly o: PoolServiceOptions,
  ) {}

  /** Reads the pools from the store and starts keeping the nodes' shares. */
  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(
      () => void this.sync().catch((e: unknown) => this.o.logger.warn('the warm pools could not be synced', { error: String(e) })),
      this.o.syncEveryMs ?? 1000,
    );
    this.timer.unref();
  }

  async create(caller: Caller, req: CreatePoolRequest): Promise<Pool> {
    const { layers, resources, network } = await this.sandboxes.resolve(caller, req);
    const rec: PoolRecord = {
      id: `pool_${newSandboxId().slice(3)}`,
      tenant: caller.tenant,
      image: req.image,
      layers,
      layerNames: req.layers ?? [],
      resources,
      network: {
        egress: network.egress ?? 'deny',
        allow: network.allow ?? [],
        deny: network.deny ?? [],
        ...(network.endpoints ? { endpoints: network.endpoints } : {}),
      },
      size: req.size,
      createdAt: Date.now(),
      quota: caller.quota,
    };
    // Its sandboxes are the tenant's: all of them must fit in the key's quota.
    await this.sandboxes.checkQuota(caller.tenant, caller.quota, resources, req.size);
    const nodes = poolNodes(this.cluster.up(), rec);
    if (!nodes.length) throw new WarrenError('resource_exhausted', 'no node can keep sandboxes of this size and network now', { resources });
    await Promise.any(nodes.map((n) => n.api.admit(resources))).catch(() => {
      throw new WarrenError('resource_exhausted', 'no node has room for a sandbox of this size now', { resources });
    });
    await this.store.putPool(rec);
    this.pools.set(rec.id, rec);
    await this.sync(true);
    return this.toApi(rec, await this.loads());
  }

  async list(caller: Caller): Promise<Pool[]> {
    const loads = await this.loads();
    return [...this.pools.values()].filter((p) => p.tenant === caller.tenant || caller.role === 'admin').map((p) => this.toApi(p, loads));
  }

  async delete(caller: Caller, id: string): Promise<void> {
    const p = this.pools.get(id);
    if (!p || (p.tenant !== caller.tenant && caller.role !== 'admin')) throw new WarrenError('not_found', `pool ${id} does not exist`, { id });
    await this.store.deletePool(id);
    this.pools.delete(id);
    this.claims.delete(id);
    await this.sync(true);
  }

  any(): boolean {
    return this.pools.size > 0;
  }

  /**
   * What a tenant's pools keep (their sizes, however full they are now): it counts against its
   * quota, as sandboxes of its own do.
   */
  held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } {
    const u = { sandboxes: 0, cpu: 0, memoryMiB: 0 };
    for (const p of this.pools.values()) {
      if (p.tenant !== tenant) continue;
      u.sandboxes += p.size;
      u.cpu += p.size * p.resources.cpu;
      u.memoryMiB += p.size * p.resources.memoryMiB;
    }
    return u;
  }

  /** A pool's key (poolKey), made once for each record read: a claim compares it with every pool's. */
  private keyOf(p: PoolRecord): string {
    let k = this.keys.get(p);
    if (k === undefined) this.keys.set(p, (k = poolKey(p.tenant, p.layers, p.resources, p.network)));
    return k;
  }

  /** A ready member of a pool with this key, taken from its node; null when none is ready (or no pool matches). */
  async claim(key: string): Promise<{ id: string; node: string } | null> {
    const pools = [...this.pools.values()].filter((p) => this.keyOf(p) === key);
    if (!pools.length) return null;
    let loads: Map<string, EdgeLoad> | undefined;
    for (const p of pools) {
      const up = poolNodes(this.cluster.up(), p);
      // The nodes that said they had one ready first, most first; then the others (their loads may
      // be old). One node has nothing to order: the local node's load is read anew (a walk over its
      // sandboxes), not at every claim for nothing.
      if (up.length > 1) loads ??= await this.loads();
      const ready = (id: string): number => loads?.get(id)?.pools?.find((x) => x.id === p.id)?.ready ?? 0;
      const nodes = up.map((n) => ({ n, ready: ready(n.id) })).sort((a, b) => b.ready - a.ready);
      for (const { n } of nodes) {
        const id = await n.api.poolTake(p.id).catch(() => null);
        if (!id) continue;
        const c = this.claims.get(p.id) ?? { claims: 0, recent: [] };
        const now = Date.now();
        c.claims++;
        c.recent.push(now);
        while (c.recent.length && c.recent[0]! < now - 10_000) c.recent.shift();
        this.claims.set(p.id, c);
        // The node refills once told again (claimed(), after the claim is recorded: the quota counts it then).
        return { id, node: n.id };
      }
    }
    return null;
  }

  /**
   * A claim is recorded (the sandbox is the tenant's in the store now): the nodes are told again
   * whether to refill. The pools are not read again for it (a claim changes none; the timer's
   * sync reads what other replicas changed).
   */
  claimed(): void {
    void this.sync(true, false).catch((e: unknown) => this.o.logger.warn('the warm pools could not be synced', { error: String(e) }));
  }

  /**
   * Reads the pools from the store (unless `reread` is false) and tells every node its shares
   * (`now`: whatever it was told before).
   */
  private sync(now = false, reread = true): Promise<void> {
    const run = async (now: boolean, reread: boolean): Promise<void> => {
      this.rereading = reread;
      if (reread) this.pools = new Map((await this.store.listPools()).map((p) => [p.id, p]));
      for (const p of this.pools.values()) {
        try {
          // A refill after claims stays within the quota of the key that made the pool (whose
          // size counts already): the claimed sandboxes are the tenant's now.
          await this.sandboxes.checkQuota(p.tenant, p.quota ?? {}, p.resources, 0);
          this.refused.delete(p.id);
        } catch (e) {
          this.refused.set(p.id, e instanceof Error ? e.message : String(e));
        }
      }
      const specs = new Map<string, EdgePoolSpec[]>();
      for (const p of this.pools.values()) {
        const nodes = poolNodes(this.cluster.up(), p);
        for (const [id, size] of poolShares(
          p.id,
          p.size,
          nodes.map((n) => n.id),
        )) {
          if (!specs.has(id)) specs.set(id, []);
          specs.get(id)!.push({ id: p.id, layers: p.layers, resources: p.resources, network: p.network, size, refill: !this.refused.has(p.id) });
        }
      }
      const at = Date.now();
      await Promise.all(
        this.cluster
          .up()
          .filter((n) => n.state === 'ready')
          .map(async (n) => {
            const what = JSON.stringify(specs.get(n.id) ?? []);
            const last = this.told.get(n.boot);
            // Told again now and then: a node that restarted within one boot's id is not possible, but a lost call is.
            if (!now && last?.what === what && at - last.at < 10_000) return;
            // Bounded: a node that stops answering must not hold the others' shares back.
            await within(5000, `node ${n.id}`, n.api.poolsSet(specs.get(n.id) ?? []))
              .then(() => this.told.set(n.boot, { what, at }))
              .catch((e: unknown) => this.o.logger.warn('a node could not be told its warm pools', { node: n.id, error: String(e) }));
          }),
      );
    };
    // A run that has not started yet serves every caller until it starts (a burst of claims makes
    // one more run, not one each); it tells every node again, and reads the store, if any of the
    // callers it serves asked for that.
    if (this.syncQueued) {
      this.queuedNow ||= now;
      this.queuedReread ||= reread;
      return this.syncQueued;
    }
    // The run under way serves a caller that is not `now` (which needs a run after its change:
    // the one under way may have read the store before it), unless the caller needs the store
    // read and that run does not read it (a claim's).
    if (this.syncing && !now && (this.rereading || !reread)) return this.syncing;
    this.queuedNow = now;
    this.queuedReread = reread;
    const next: Promise<void> = (this.syncing ?? Promise.resolve())
      .catch(() => undefined)
      .then(() => {
        const [tellAll, read] = [this.queuedNow, this.queuedReread];
        if (this.syncQueued === next) {
          this.syncQueued = null;
          this.queuedNow = false;
          this.queuedReread = false;
        }
        return run(tellAll, read);
      })
      .finally(() => {
        if (this.syncing === next) this.syncing = null;
      });
    this.syncing = next;
    this.syncQueued = next;
    return next;
  }

  /** The nodes' loads: the local node's read now, the others' from their last heartbeat. */
  private async loads(): Promise<Map<string, EdgeLoad>> {
    const up = this.cluster.up();
    return new Map(await Promise.all(up.map(async (n) => [n.id, await this.cluster.loadOf(n)] as const)));
  }

  private toApi(p: PoolRecord, loads: Map<string, EdgeLoad>): Pool {
    let ready = 0;
    let nodeError: string | null = null;
    for (const l of loads.values()) {
      const mine = l.pools?.find((x) => x.id === p.id);
      ready += mine?.ready ?? 0;
      nodeError ??= mine?.lastError ?? null;
    }
    const c = this.claims.get(p.id) ?? { claims: 0, recent: [] };
    const now = Date.now();
    return {
      id: p.id,
      image: p.image,
      layers: p.layerNames,
      resources: viewResources(p.resources),
      network: p.network,
      size: p.size,
      ready,
      claims: c.claims,
      claimsPerSecond: c.recent.filter((t) => t >= now - 10_000).length / 10,
      lastError: this.refused.get(p.id) ?? nodeError,
      createdAt: new Date(p.createdAt).toISOString(),
    };
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
