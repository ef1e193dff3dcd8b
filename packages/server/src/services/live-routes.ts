import { isNotRunningHere, type EdgeApi } from '@warren/edge';
import type { SandboxRecord } from '../store/store.js';
import type { Caller } from './sandboxes.js';

/**
 * How long a route is used without the store's word (ms). Only an end that another replica
 * recorded, and whose removal from the node failed while the node stayed up, is not seen sooner
 * (its node refuses the sandbox once it is removed): a route never outlives this.
 */
export const ROUTE_MAX_AGE_MS = 30_000;
/** Routes kept at most (the oldest learned go first): ~150 bytes each. */
export const MAX_ROUTES = 100_000;

interface Route {
  tenant: string;
  node: string;
  /** Who its commands run as when a call names no one (null: the image's user). */
  user: string | null;
  /** When the store said it was live (on `now`). */
  at: number;
}

export interface LiveRoutesOptions {
  /** The store's word: the caller's sandbox, running or paused; not_found or conflict if not (SandboxService.live). */
  live: (caller: Caller, id: string) => Promise<SandboxRecord>;
  /** The edge of a node this replica sees ready or draining; undefined while it is joining, down or unknown. */
  edgeOf: (node: string) => EdgeApi | undefined;
  /** The edge of a sandbox's node as the store names it (unavailable while the node is down). */
  edge: (node: string) => EdgeApi;
  /** A monotonic clock in ms (default performance.now). */
  now?: () => number;
  maxAgeMs?: number;
  max?: number;
}

/**
 * Where this replica last found each live sandbox: its tenant and node, as the store said. A call
 * on a sandbox with a route goes straight to its node's edge, with no store read first (a round
 * trip to PostgreSQL in a cluster, for every command and file call). A sandbox's tenant never
 * changes, nor its node once it runs; the only thing that can go stale is that it is live, and the
 * edge answers that itself: it refuses a sandbox it does not run (notRunningHere), and the store is
 * then asked, so a call on an ended sandbox fails as it did with the store read first. Forgotten when
 * this replica records the sandbox's end, and after ROUTE_MAX_AGE_MS; a node that is joining
 * (its reconcile not done) or down is not gone to on a route.
 */
export class LiveRoutes {
  private readonly routes = new Map<string, Route>();
  /** Bumped by every forget: a store read that began before one does not teach its route. */
  private ends = 0;
  private readonly now: () => number;
  private readonly maxAgeMs: number;
  private readonly max: number;

  constructor(private readonly o: LiveRoutesOptions) {
    this.now = o.now ?? (() => performance.now());
    this.maxAgeMs = o.maxAgeMs ?? ROUTE_MAX_AGE_MS;
    this.max = o.max ?? MAX_ROUTES;
  }

  /** The routes kept now. */
  get size(): number {
    return this.routes.size;
  }

  /** The store's word on the caller's live sandbox, its route learned. */
  async live(caller: Caller, id: string): Promise<SandboxRecord> {
    const ends = this.ends;
    const rec = await this.o.live(caller, id);
    if (ends === this.ends) this.learn(rec);
    return rec;
  }

  /** Throws what the store says unless the caller's sandbox is live (without asking it when a route is known). */
  async check(caller: Caller, id: string): Promise<void> {
    if (!this.known(caller, id)) await this.live(caller, id);
  }

  /** The default user of the caller's live sandbox (null: the image's); the store's error if it is not live. */
  async user(caller: Caller, id: string): Promise<string | null> {
    return this.known(caller, id) ? this.routes.get(id)!.user : (await this.live(caller, id)).user;
  }

  /**
   * Runs `call` on the edge of the caller's live sandbox. On a route, the edge's refusal of a
   * sandbox it does not run forgets the route and asks the store: its error if the sandbox is not
   * live, the edge's if it is. Nothing is called twice. (A call the edge took that fails later,
   * a command whose sandbox is deleted under it, answers as it would without a route.)
   */
  async on<T>(caller: Caller, id: string, call: (sid: string, edge: EdgeApi) => Promise<T>): Promise<T> {
    const edge = this.known(caller, id);
    if (!edge) {
      const rec = await this.live(caller, id);
      return call(rec.id, this.o.edge(rec.node));
    }
    try {
      return await call(id, edge);
    } catch (e) {
      if (!isNotRunningHere(e)) throw e;
      this.forget(id);
      await this.live(caller, id);
      throw e;
    }
  }

  /** Forgets a sandbox's route (its end is recorded here). */
  forget(id: string): void {
    this.ends++;
    this.routes.delete(id);
  }

  private learn(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'node' | 'user'>): void {
    this.routes.delete(rec.id);
    if (this.routes.size >= this.max) {
      const oldest = this.routes.keys().next();
      if (!oldest.done) this.routes.delete(oldest.value);
    }
    this.routes.set(rec.id, { tenant: rec.tenant, node: rec.node, user: rec.user, at: this.now() });
  }

  /** The edge of a route the caller may use now, if any. */
  private known(caller: Caller, id: string): EdgeApi | undefined {
    const r = this.routes.get(id);
    if (!r) return undefined;
    if (this.now() - r.at > this.maxAgeMs) {
      this.routes.delete(id);
      return undefined;
    }
    // Another tenant's sandbox: the store answers (not_found, as for an id nobody has).
    if (r.tenant !== caller.tenant && caller.role !== 'admin') return undefined;
    return this.o.edgeOf(r.node);
  }
}
