import { WarrenError, type CreatePoolRequest, type Pool } from '@warren/api';
import type { EdgeApi, EdgeSandboxSpec } from '@warren/edge';
import type { PoolRecord, Store } from '../store/store.js';
import { newSandboxId } from './ids.js';
import { poolKey, unclaimedSpec, type Caller, type SandboxService } from './sandboxes.js';

interface PoolState {
  rec: PoolRecord;
  key: string;
  /** Sandboxes made for it and not yet claimed, oldest first. */
  ready: string[];
  creating: number;
  claims: number;
  /** Times of recent claims (for claims per second). */
  recent: number[];
  lastError: string | null;
  /** After a failed refill, no new try before this time. */
  retryAt: number;
}

export interface PoolServiceOptions {
  logger: { warn(msg: string, meta?: unknown): void };
  /** How often the pools are topped up (default 100 ms). */
  refillEveryMs?: number;
}

/**
 * Warm pools: sandboxes of one spec made ahead, in the background, never on a request's path.
 * A pool's sandboxes run on the edge and are not in the store until a create claims one (a
 * restart therefore removes them as leftovers, and the pools fill up again).
 */
export class PoolService {
  private readonly pools = new Map<string, PoolState>();
  private timer: NodeJS.Timeout | null = null;
  private filling = false;

  constructor(
    private readonly store: Store,
    private readonly edge: EdgeApi,
    private readonly sandboxes: SandboxService,
    private readonly o: PoolServiceOptions,
  ) {}

  /** Loads the pools kept in the store and starts topping them up. */
  async start(): Promise<void> {
    for (const rec of await this.store.listPools()) this.pools.set(rec.id, this.state(rec));
    this.timer = setInterval(() => void this.refill(), this.o.refillEveryMs ?? 100);
    this.timer.unref();
  }

  private state(rec: PoolRecord): PoolState {
    return {
      rec,
      key: poolKey(rec.tenant, rec.layers, rec.resources, rec.network),
      ready: [],
      creating: 0,
      claims: 0,
      recent: [],
      lastError: null,
      retryAt: 0,
    };
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
      network: { egress: network.egress ?? 'deny', allow: network.allow ?? [], deny: network.deny ?? [] },
      size: req.size,
      createdAt: Date.now(),
      quota: caller.quota,
    };
    // Its sandboxes are the tenant's: all of them must fit in the key's quota.
    await this.sandboxes.checkQuota(caller.tenant, caller.quota, resources, req.size);
    await this.edge.admit(resources);
    await this.store.putPool(rec);
    const st = this.state(rec);
    this.pools.set(rec.id, st);
    void this.refill();
    return this.toApi(st);
  }

  list(caller: Caller): Pool[] {
    return [...this.pools.values()].filter((p) => p.rec.tenant === caller.tenant || caller.role === 'admin').map((p) => this.toApi(p));
  }

  async delete(caller: Caller, id: string): Promise<void> {
    const p = this.pools.get(id);
    if (!p || (p.rec.tenant !== caller.tenant && caller.role !== 'admin')) throw new WarrenError('not_found', `pool ${id} does not exist`, { id });
    this.pools.delete(id);
    await this.store.deletePool(id);
    for (const sid of p.ready.splice(0)) await this.edge.destroy(sid).catch(() => undefined);
  }

  /**
   * What a tenant's pools keep (their sizes, however full they are now): it counts against its
   * quota, as sandboxes of its own do.
   */
  held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } {
    const u = { sandboxes: 0, cpu: 0, memoryMiB: 0 };
    for (const p of this.pools.values()) {
      if (p.rec.tenant !== tenant) continue;
      u.sandboxes += p.rec.size;
      u.cpu += p.rec.size * p.rec.resources.cpu;
      u.memoryMiB += p.rec.size * p.rec.resources.memoryMiB;
    }
    return u;
  }

  /** A ready sandbox of the pool with this key, taken out of it; null when none is ready. */
  async claim(key: string): Promise<string | null> {
    for (const p of this.pools.values()) {
      if (p.key !== key) continue;
      while (p.ready.length) {
        const id = p.ready.shift()!;
        if (!(await this.edge.sandboxes({ ids: [id] })).length) continue; // it died meanwhile
        const now = Date.now();
        p.claims++;
        p.recent.push(now);
        while (p.recent.length && p.recent[0]! < now - 10_000) p.recent.shift();
        return id;
      }
    }
    return null;
  }

  /** Tops every pool up, one sandbox at a time per pool. */
  private async refill(): Promise<void> {
    if (this.filling) return;
    this.filling = true;
    try {
      for (const p of [...this.pools.values()]) {
        if (p.ready.length) {
          const live = new Set((await this.edge.sandboxes({ ids: p.ready })).map((x) => x.id));
          p.ready = p.ready.filter((id) => live.has(id));
        }
        while (this.pools.has(p.rec.id) && p.ready.length + p.creating < p.rec.size && Date.now() >= p.retryAt && !this.claiming(p)) {
          const id = newSandboxId();
          try {
            // A refill after claims stays within the quota of the key that made the pool (whose
            // size counts already): the claimed sandboxes are the tenant's now.
            await this.sandboxes.checkQuota(p.rec.tenant, p.rec.quota ?? {}, p.rec.resources, 0);
          } catch (e) {
            p.lastError = e instanceof Error ? e.message : String(e);
            p.retryAt = Date.now() + 2000;
            break;
          }
          p.creating++;
          try {
            await this.edge.create(this.spec(p.rec, id));
            if (this.pools.has(p.rec.id)) p.ready.push(id);
            else await this.edge.destroy(id).catch(() => undefined);
            p.lastError = null;
          } catch (e) {
            p.lastError = e instanceof Error ? e.message : String(e);
            p.retryAt = Date.now() + 2000;
            this.o.logger.warn('could not refill a warm pool', { pool: p.rec.id, error: p.lastError });
          } finally {
            p.creating--;
          }
        }
      }
    } finally {
      this.filling = false;
    }
  }

  /**
   * Whether claims are coming in fast right now (one in the last 200 ms) while the pool still
   * has a quarter of its size ready: refilling then would take CPU from the claims.
   */
  private claiming(p: PoolState): boolean {
    const last = p.recent[p.recent.length - 1];
    return last !== undefined && Date.now() - last < 200 && p.ready.length >= p.rec.size / 4;
  }

  private spec(rec: PoolRecord, id: string): EdgeSandboxSpec {
    const { cpu, memoryMiB, pids, diskMiB } = rec.resources;
    return unclaimedSpec(id, rec.layers, { cpu, memoryMiB, pids, diskMiB }, { network: rec.network });
  }

  private toApi(p: PoolState): Pool {
    const now = Date.now();
    const recent = p.recent.filter((t) => t >= now - 10_000).length;
    return {
      id: p.rec.id,
      image: p.rec.image,
      layers: p.rec.layerNames,
      resources: p.rec.resources,
      network: p.rec.network,
      size: p.rec.size,
      ready: p.ready.length,
      claims: p.claims,
      claimsPerSecond: recent / 10,
      lastError: p.lastError,
      createdAt: new Date(p.rec.createdAt).toISOString(),
    };
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
