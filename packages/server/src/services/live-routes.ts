import { WarrenError } from '@warren/api';
import { isNotRunningHere, type EdgeApi } from '@warren/edge';
import { RecentMap } from '../placement/recent-map.js';
import type { SandboxRecord } from '../store/store.js';
import type { Caller } from './sandboxes.js';

/**
 * How long a route is used without the store's word (ms). Only an end that another replica
 * recorded, and whose removal from the node failed while the node stayed up, is not seen sooner
 * (its node refuses the sandbox once it is removed): a route never outlives this.
 */
export const ROUTE_MAX_AGE_MS = 30_000;
/** Routes kept at most (the oldest learned go first): ~200 bytes each. */
export const MAX_ROUTES = 100_000;

interface Route {
  tenant: string;
  node: string;
  /** Who its commands run as when a call names no one (null: the image's user). */
  user: string | null;
  /** When the store said it was live (on `now`). */
  at: number;
  /** Fires when its node goes down or starts anew (a route from before is not used after). */
  gone: AbortSignal;
}

/** The nodes as the routes need them (the Cluster). */
export interface RouteNodes {
  /** The edge of a node this replica sees ready or draining; undefined while it is joining, down or unknown. */
  settled(node: string): EdgeApi | undefined;
  /** The edge of a sandbox's node as the store names it (unavailable while the node is down). */
  edge(node: string): EdgeApi;
  /** Fires when the node goes down or starts anew. */
  goneSignal(node: string): AbortSignal;
  /** Counts the times a node went down or started anew, on this replica. */
  readonly losses: number;
}

export interface LiveRoutesOptions {
  /** The store's record of the caller's sandbox, in any state; not_found for other tenants' ids (SandboxService.record). */
  record: (caller: Caller, id: string) => Promise<SandboxRecord>;
  nodes: RouteNodes;
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
 * this replica records the sandbox's end, and after ROUTE_MAX_AGE_MS; not used once its node went
 * down or started anew since, nor while the node is joining.
 */
export class LiveRoutes {
  private readonly routes: RecentMap<string, Route>;
  /** The store reads under way, per sandbox: a forget marks them, and a marked read teaches no route. */
  private readonly reading = new Map<string, Set<{ stale: boolean }>>();
  private readonly now: () => number;
  private readonly maxAgeMs: number;
  /** Calls that went on a route, and those that read the store first (for /metrics). */
  readonly counts = { routed: 0, read: 0 };

  constructor(private readonly o: LiveRoutesOptions) {
    this.now = o.now ?? (() => performance.now());
    this.maxAgeMs = o.maxAgeMs ?? ROUTE_MAX_AGE_MS;
    this.routes = new RecentMap(o.max ?? MAX_ROUTES);
  }

  /** The routes kept now. */
  get size(): number {
    return this.routes.size;
  }

  /** The store's word on the caller's live sandbox: conflict when it is not running or paused. */
  async live(caller: Caller, id: string): Promise<SandboxRecord> {
    const rec = await this.read(caller, id);
    if (rec.state !== 'running' && rec.state !== 'paused') throw new WarrenError('conflict', `sandbox ${id} is ${rec.state}`, { id, state: rec.state });
    return rec;
  }

  /** Throws what `live` would, without asking the store when a route is known. */
  async check(caller: Caller, id: string): Promise<void> {
    if (!this.known(caller, id)) await this.live(caller, id);
  }

  /** The default user of the caller's sandbox (null: the image's), in any state; from its route when known. */
  async user(caller: Caller, id: string): Promise<string | null> {
    return this.known(caller, id) ? this.routes.get(id)!.user : (await this.read(caller, id)).user;
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
      return call(rec.id, this.o.nodes.edge(rec.node));
    }
    this.counts.routed++;
    try {
      return await call(id, edge);
    } catch (e) {
      if (!isNotRunningHere(e)) throw e;
      this.forget(id);
      await this.live(caller, id);
      throw e;
    }
  }

  /** Forgets a sandbox's route (its end is recorded here), and what a store read under way would teach. */
  forget(id: string): void {
    this.routes.delete(id);
    for (const r of this.reading.get(id) ?? []) r.stale = true;
  }

  /**
   * Runs `write`, the store's mark of new sandboxes running (a create's, a batch's); learns the
   * route of each that `running` says it marked, unless its end was recorded here meanwhile: the
   * first call on a sandbox just made does not read the store either. `losses`: the nodes' loss
   * count when the sandboxes were placed (a node lost since, no route is learned).
   */
  async started<T>(
    recs: Array<Pick<SandboxRecord, 'id' | 'tenant' | 'node' | 'user'>>,
    write: () => Promise<T>,
    running: (r: T, id: string) => boolean,
    losses = this.o.nodes.losses,
  ): Promise<T> {
    const watch = this.watch(
      recs.map((r) => r.id),
      losses,
    );
    let r: T;
    try {
      r = await write();
    } finally {
      watch.end();
    }
    for (const [i, rec] of recs.entries()) if (watch.fresh(i) && running(r, rec.id)) this.learn(rec);
    return r;
  }

  /** Reads the record; learns the route when it is live and nothing changed meanwhile. */
  private async read(caller: Caller, id: string): Promise<SandboxRecord> {
    this.counts.read++;
    const watch = this.watch([id]);
    let rec: SandboxRecord;
    try {
      rec = await this.o.record(caller, id);
    } finally {
      watch.end();
    }
    if (watch.fresh(0) && (rec.state === 'running' || rec.state === 'paused')) this.learn(rec);
    return rec;
  }

  /**
   * Marks these sandboxes' store calls under way: `fresh(i)` once they end, if no end of the i-th
   * was recorded here and no node was lost meanwhile (its signal now would be a new one, which
   * would not tell of that loss).
   */
  private watch(ids: string[], losses = this.o.nodes.losses): { end(): void; fresh(i: number): boolean } {
    const marks = ids.map((id) => {
      const mark = { stale: false };
      let set = this.reading.get(id);
      if (!set) this.reading.set(id, (set = new Set()));
      set.add(mark);
      return { id, mark, set };
    });
    return {
      end: () => {
        for (const { id, mark, set } of marks) {
          set.delete(mark);
          if (!set.size && this.reading.get(id) === set) this.reading.delete(id);
        }
      },
      fresh: (i) => !marks[i]!.mark.stale && losses === this.o.nodes.losses,
    };
  }

  private learn(rec: Pick<SandboxRecord, 'id' | 'tenant' | 'node' | 'user'>): void {
    this.routes.set(rec.id, { tenant: rec.tenant, node: rec.node, user: rec.user, at: this.now(), gone: this.o.nodes.goneSignal(rec.node) });
  }

  /** The edge of a route the caller may use now, if any. */
  private known(caller: Caller, id: string): EdgeApi | undefined {
    const r = this.routes.get(id);
    if (!r) return undefined;
    if (this.now() - r.at > this.maxAgeMs || r.gone.aborted) {
      this.routes.delete(id);
      return undefined;
    }
    // Another tenant's sandbox: the store answers (not_found, as for an id nobody has).
    if (r.tenant !== caller.tenant && caller.role !== 'admin') return undefined;
    return this.o.nodes.settled(r.node);
  }
}
