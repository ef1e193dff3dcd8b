import type { NetworkPolicy } from '@warren/api';
import { unclaimedSpec, type EdgeSandboxSpec } from './edge-spec.js';

/** A warm pool as a node keeps its share of it: sandboxes of one spec, made ahead for nobody yet. */
export interface EdgePoolSpec {
  id: string;
  layers: string[];
  resources: EdgeSandboxSpec['resources'];
  network: NetworkPolicy;
  /** How many this node keeps ready (its share of the pool's size). */
  size: number;
  /** Whether it may make more now (false: the tenant's quota is full; what is ready stays). */
  refill: boolean;
}

/** A pool's members on this node, in its load. */
export interface EdgePoolLoad {
  id: string;
  ready: number;
  creating: number;
  lastError: string | null;
}

/** What the members need of their node. */
export interface PoolNode {
  create(spec: EdgeSandboxSpec): Promise<void>;
  destroy(id: string): Promise<void>;
  has(id: string): boolean;
  newId(): string;
  now(): number;
  logger?: { warn(msg: string, meta?: unknown): void };
}

interface Kept {
  spec: EdgePoolSpec;
  /** Ready members, oldest first. */
  ready: string[];
  creating: number;
  /** Times of recent takes (a burst of claims holds the refill back). */
  recent: number[];
  lastError: string | null;
  retryAt: number;
}

/**
 * A node's members of warm pools: the node makes them in the background under its own
 * admission, one at a time per pool, and hands one over when the control plane claims it. They
 * are the node's until then: listed nowhere, no events, removed when the node stops (a member
 * holds nobody's state). The control plane says what to keep (set), the same from any replica.
 */
export class PoolMembers {
  private readonly pools = new Map<string, Kept>();
  private readonly owned = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private filling = false;
  private closed = false;

  constructor(private readonly node: PoolNode) {}

  start(refillEveryMs = 100): void {
    this.timer = setInterval(() => void this.refill(), refillEveryMs);
    this.timer.unref();
  }

  /** What to keep from now on: pools left out lose their members here; a smaller share loses the extra. */
  set(specs: EdgePoolSpec[]): void {
    const want = new Map(specs.map((s) => [s.id, s]));
    for (const [id, k] of this.pools) {
      const s = want.get(id);
      if (!s || JSON.stringify([s.layers, s.resources, s.network]) !== JSON.stringify([k.spec.layers, k.spec.resources, k.spec.network])) {
        this.pools.delete(id);
        this.drop(k.ready.splice(0));
      }
    }
    for (const s of specs) {
      const k = this.pools.get(s.id);
      if (!k) this.pools.set(s.id, { spec: s, ready: [], creating: 0, recent: [], lastError: null, retryAt: 0 });
      else {
        k.spec = s;
        if (k.ready.length > s.size) this.drop(k.ready.splice(0, k.ready.length - s.size));
        if (!s.refill && k.lastError === null) k.lastError = 'the tenant is over its quota';
      }
    }
    void this.refill();
  }

  /** A ready member of the pool, no longer the node's: the caller claims it (null: none is ready). */
  take(poolId: string): string | null {
    const k = this.pools.get(poolId);
    if (!k) return null;
    while (k.ready.length) {
      const id = k.ready.shift()!;
      this.owned.delete(id);
      if (!this.node.has(id)) continue;
      const now = this.node.now();
      k.recent.push(now);
      while (k.recent.length && k.recent[0]! < now - 10_000) k.recent.shift();
      // No refill until told again: the claimed sandbox may fill its tenant's quota.
      k.spec = { ...k.spec, refill: false };
      return id;
    }
    return null;
  }

  owns(id: string): boolean {
    return this.owned.has(id);
  }

  /** A member died: it is forgotten (and replaced). */
  died(id: string): void {
    if (!this.owned.delete(id)) return;
    for (const k of this.pools.values()) k.ready = k.ready.filter((x) => x !== id);
    void this.node.destroy(id).catch(() => undefined);
  }

  load(): EdgePoolLoad[] {
    return [...this.pools.values()].map((k) => ({ id: k.spec.id, ready: k.ready.length, creating: k.creating, lastError: k.lastError }));
  }

  private drop(ids: string[]): void {
    for (const id of ids) {
      this.owned.delete(id);
      void this.node.destroy(id).catch(() => undefined);
    }
  }

  /** Tops every pool up, one sandbox at a time per pool. */
  private async refill(): Promise<void> {
    if (this.filling || this.closed) return;
    this.filling = true;
    try {
      for (const k of [...this.pools.values()]) {
        while (this.pools.get(k.spec.id) === k && !this.closed && k.spec.refill && k.ready.length + k.creating < k.spec.size) {
          if (this.node.now() < k.retryAt || this.claiming(k)) break;
          const id = this.node.newId();
          k.creating++;
          this.owned.add(id);
          try {
            await this.node.create(unclaimedSpec(id, k.spec.layers, k.spec.resources, this.node.now(), { network: k.spec.network }));
            if (this.pools.get(k.spec.id) === k && !this.closed) k.ready.push(id);
            else this.drop([id]);
            k.lastError = null;
          } catch (e) {
            this.owned.delete(id);
            // Bounded: it travels in every heartbeat.
            k.lastError = (e instanceof Error ? e.message : String(e)).slice(0, 1000);
            k.retryAt = this.node.now() + 2000;
            this.node.logger?.warn('could not refill a warm pool', { pool: k.spec.id, error: k.lastError });
          } finally {
            k.creating--;
          }
        }
      }
    } finally {
      this.filling = false;
    }
  }

  /**
   * Whether claims are coming in fast right now (one in the last 200 ms) while the pool still
   * has a quarter of its share ready: refilling then would take CPU from the claims.
   */
  private claiming(k: Kept): boolean {
    const last = k.recent[k.recent.length - 1];
    return last !== undefined && this.node.now() - last < 200 && k.ready.length >= k.spec.size / 4;
  }

  /** Removes every member (also when the node keeps its sandboxes: members hold nobody's state). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    const ids = [...this.owned];
    this.owned.clear();
    this.pools.clear();
    await Promise.all(ids.map((id) => this.node.destroy(id).catch(() => undefined)));
  }
}
