import { setMaxListeners } from 'node:events';
import { WarrenError } from '@warren/api';
import { remoteEdgeApi, type EdgeApi, type EdgeEvent, type EdgeInfo, type EdgeLoad, type RemoteEdgeApi } from '@warren/edge';
import { endNow, type NodeRecord, type NodeState, type Store } from '../store/store.js';
import { EdgeEventReader } from './edge-events.js';

/** What changed of a node: its row or load read anew, a new boot or address, or it left the table. */
export type NodeChange = 'read' | 'restarted' | 'left';

/** A node this control plane reaches: its row's view and a client of its edge. */
export interface ClusterNode {
  id: string;
  state: NodeState;
  address: string;
  boot: string;
  /** The certificate its edge protocol's TLS is pinned to; null: plain TCP (the local node's: no network at all). */
  tlsFingerprint: string | null;
  info: EdgeInfo;
  /** Its last heartbeat's load (the local node's is read when asked). */
  load: EdgeLoad;
  heartbeatAt: number;
  api: EdgeApi;
  /** The edge in this process (`warren up`): always ready, never in the node table. */
  local: boolean;
}

export interface ClusterOptions {
  store: Store;
  /** The node table is read again this often (ms; default 1000). */
  refreshMs?: number;
  /** A node silent this long is marked down and its sandboxes failed (ms; default 10,000). */
  downAfterMs?: number;
  /** Each node's events, in order per node. */
  onEvent: (node: string, ev: EdgeEvent) => void | Promise<void>;
  /** Sandboxes that failed because their node went down (for the log). */
  onNodeDown?: (node: string, failed: string[]) => void;
  logger: { info(msg: string, meta?: unknown): void; warn(msg: string, meta?: unknown): void };
  /** A monotonic clock in ms (default performance.now): tests advance their own. */
  now?: () => number;
}

const EMPTY_LOAD: EdgeLoad = { at: 0, committed: { cpu: 0, memoryMiB: 0 }, requested: { cpu: 0, memoryMiB: 0 }, used: null, sandboxes: 0, paused: 0 };

/** A client of a node's edge at `host:port`; over TLS pinned to `tlsFingerprint` when it has one. */
export function connectEdge(address: string, token: string, tlsFingerprint: string | null = null): RemoteEdgeApi {
  const at = address.lastIndexOf(':');
  const host = address.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  return remoteEdgeApi({ host, port: Number(address.slice(at + 1)), token, tls: tlsFingerprint ? { fingerprint: tlsFingerprint } : undefined });
}

/**
 * The nodes a control plane reaches: their membership. With `warren up` one edge in this
 * process; with `warren server` the node table in the store, read again every second (each
 * replica keeps its own copy), a client and an event reader per node, marked down when silent. A
 * node's load is the latest the replica has seen: its heartbeat, or the answer to a create there
 * (offerLoad), whichever the edge read later. Where creates go is placement's
 * (placement/node-view.ts watches the table).
 */
export class Cluster {
  private readonly nodes = new Map<string, ClusterNode>();
  private readonly readers = new Map<string, { boot: string; reader: EdgeEventReader }>();
  /** Fires when a node goes down or starts anew (what calls in flight there stop waiting on). */
  private readonly gone = new Map<string, AbortController>();
  /** Told of each change to a node: its row or load read anew (`restarted`: a new boot or address), or its leaving. */
  private readonly watchers = new Set<(id: string, change: NodeChange) => void>();
  private timer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;
  /**
   * No node is marked down before this (on `now`): the down delay after this replica
   * started, and after it could not reach the store. Heartbeats sent meanwhile may not have been
   * recorded (the store was away, or no replica ran): a node must get a whole down delay of
   * heartbeats recorded before its silence counts, or a database restart or a control-plane
   * restart longer than the delay would fail every sandbox of every node.
   */
  private quietUntil: number;
  private storeLost = false;
  private lost = 0;
  private readonly now: () => number;

  constructor(private readonly o: ClusterOptions) {
    this.now = o.now ?? (() => performance.now());
    this.quietUntil = this.now() + (o.downAfterMs ?? 10_000);
  }

  /** Adds the edge of this process (`warren up`): ready for as long as the process runs. */
  addLocal(api: EdgeApi, info: EdgeInfo): void {
    this.nodes.set(info.nodeId, {
      id: info.nodeId,
      state: 'ready',
      address: 'local',
      boot: info.boot,
      tlsFingerprint: null,
      info,
      load: EMPTY_LOAD,
      heartbeatAt: Date.now(),
      api,
      local: true,
    });
    this.changed(info.nodeId, 'restarted');
    this.follow(info.nodeId, info.boot, api);
  }

  /** Reads the node table now and then every `refreshMs`. */
  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(
      () => void this.refresh().catch((e: unknown) => this.o.logger.warn('the node table could not be read', { error: String(e) })),
      this.o.refreshMs ?? 1000,
    );
    this.timer.unref();
  }

  /**
   * Reads the node table: marks down the nodes silent too long (their live sandboxes failed, by
   * whichever replica marks them first), then takes every row's state, load and address.
   */
  refresh(): Promise<void> {
    this.refreshing ??= this.readTable().finally(() => (this.refreshing = null));
    return this.refreshing;
  }

  /** Reads the node table anew: after a refresh already going (which may have read it before a change this caller made). */
  async refreshNow(): Promise<void> {
    await this.refreshing?.catch(() => undefined);
    await this.refresh();
  }

  private async readTable(): Promise<void> {
    const downAfterMs = this.o.downAfterMs ?? 10_000;
    let rows: NodeRecord[];
    try {
      if (!this.storeLost && this.now() >= this.quietUntil)
        for (const id of await this.o.store.markNodesDown(downAfterMs)) {
          const message = `node ${id} stopped answering (no heartbeat)`;
          const failed = await this.o.store.failLiveOnNode(id, { code: 'unavailable', message }, endNow('node_lost', message));
          this.o.logger.warn('a node is down', { node: id, failedSandboxes: failed.length });
          this.o.onNodeDown?.(id, failed);
        }
      rows = await this.o.store.listNodes();
    } catch (e) {
      if (e instanceof WarrenError && e.code === 'unavailable') this.storeLost = true;
      throw e;
    }
    if (this.storeLost) {
      this.storeLost = false;
      this.quietUntil = this.now() + downAfterMs;
    }
    const seen = new Set<string>();
    for (const r of rows) {
      seen.add(r.id);
      this.take(r);
    }
    for (const [id, n] of this.nodes) if (!n.local && !seen.has(id)) this.drop(id);
  }

  /** A row of the table into this replica's view (a new boot or address: a new client). */
  private take(r: NodeRecord): void {
    const cur = this.nodes.get(r.id);
    const same = cur && cur.boot === r.boot && cur.address === r.address && cur.tlsFingerprint === r.tlsFingerprint;
    const api = same ? cur.api : connectEdge(r.address, r.token, r.tlsFingerprint);
    if (cur && !same) {
      (cur.api as RemoteEdgeApi).disconnect();
      this.lose(r.id);
    }
    if (r.state === 'down') this.lose(r.id);
    this.nodes.set(r.id, {
      id: r.id,
      state: r.state,
      address: r.address,
      boot: r.boot,
      tlsFingerprint: r.tlsFingerprint,
      info: r.info as EdgeInfo,
      // A create's answer read later than this heartbeat is the truer load.
      load: same && cur.load.at > (r.load as EdgeLoad).at ? cur.load : (r.load as EdgeLoad),
      heartbeatAt: r.heartbeatAt,
      api,
      local: false,
    });
    this.changed(r.id, same ? 'read' : 'restarted');
    if (r.state === 'down') this.unfollow(r.id);
    else this.follow(r.id, r.boot, api);
  }

  /** Counts the times a node went down, started anew or left, on this replica (what a route learned meanwhile must not outlive). */
  get losses(): number {
    return this.lost;
  }

  private lose(id: string): void {
    this.lost++;
    this.gone.get(id)?.abort();
    this.gone.delete(id);
  }

  /** A signal that fires when the node goes down or its edge starts anew. */
  goneSignal(id: string): AbortSignal {
    let c = this.gone.get(id);
    if (!c) {
      c = new AbortController();
      // Every create in flight there listens to it.
      setMaxListeners(0, c.signal);
      this.gone.set(id, c);
    }
    return c.signal;
  }

  private drop(id: string): void {
    this.lose(id);
    const n = this.nodes.get(id);
    this.nodes.delete(id);
    this.changed(id, 'left');
    this.unfollow(id);
    if (n && !n.local) (n.api as RemoteEdgeApi).disconnect();
  }

  /** Reads a node's events (once per boot: a restarted edge numbers them anew). */
  private follow(id: string, boot: string, api: EdgeApi): void {
    const cur = this.readers.get(id);
    if (cur?.boot === boot) return;
    this.unfollow(id);
    const reader = new EdgeEventReader(api, (ev) => this.o.onEvent(id, ev), this.o.logger);
    this.readers.set(id, { boot, reader });
  }

  private unfollow(id: string): void {
    const cur = this.readers.get(id);
    if (!cur) return;
    this.readers.delete(id);
    void cur.reader.stop();
  }

  /** The event reader of a node (what a sweep waits on). */
  reader(id: string): EdgeEventReader | undefined {
    return this.readers.get(id)?.reader;
  }

  /** A node by id; not_found when the table has none. */
  node(id: string): ClusterNode {
    const n = this.nodes.get(id);
    if (!n) throw new WarrenError('not_found', `no node ${id}`, { node: id });
    return n;
  }

  /** The edge a sandbox on `node` is reached through; unavailable while the node is down or unknown. */
  edge(node: string): EdgeApi {
    const n = this.nodes.get(node);
    if (!n || n.state === 'down')
      throw new WarrenError('unavailable', `the sandbox's node ${node} is ${n ? 'down' : 'not known'}`, { node, state: n?.state ?? null });
    return n.api;
  }

  /** The edge of a node that is ready or draining (not down, not joining); undefined otherwise. */
  settled(node: string): EdgeApi | undefined {
    const n = this.nodes.get(node);
    return n && (n.state === 'ready' || n.state === 'draining') ? n.api : undefined;
  }

  /** Every node this replica knows, down ones included. */
  all(): ClusterNode[] {
    return [...this.nodes.values()];
  }

  /** The nodes not down (what a list or a layer count asks). */
  up(): ClusterNode[] {
    return this.all().filter((n) => n.state !== 'down');
  }

  /** Backend names some node runs. */
  backends(): Set<string> {
    return new Set(this.up().flatMap((n) => n.info.backends.map((b) => b.name)));
  }

  /** Whether some node that is not down runs `backend` (a create's check: stops at the first). */
  hasBackend(backend: string): boolean {
    for (const n of this.nodes.values()) if (n.state !== 'down' && n.info.backends.some((b) => b.name === backend)) return true;
    return false;
  }

  /** Whether some node gives sandboxes a network beyond loopback. */
  networking(): boolean {
    for (const n of this.nodes.values()) if (n.state !== 'down' && n.info.networking) return true;
    return false;
  }

  /** The operator's endpoints some node that is not down offers, by name (`--endpoint`). */
  endpoints(): Set<string> {
    return new Set(this.up().flatMap((n) => n.info.endpoints ?? []));
  }

  /** Calls `fn` at each change to a node (placement's view follows the table so). */
  watch(fn: (id: string, change: NodeChange) => void): void {
    this.watchers.add(fn);
  }

  private changed(id: string, change: NodeChange): void {
    for (const w of this.watchers) w(id, change);
  }

  /** A load a node answered with (a create's): kept when the edge read it later than the one held; answers whether it was. */
  offerLoad(id: string, load: EdgeLoad): boolean {
    const n = this.nodes.get(id);
    if (!n || load.at <= n.load.at) return false;
    n.load = load;
    this.changed(id, 'read');
    return true;
  }

  /** A node by id, if the table has it. */
  find(id: string): ClusterNode | undefined {
    return this.nodes.get(id);
  }

  /** A node's load: the local node's read now (`used` too when asked), another's its latest seen. */
  async loadOf(n: ClusterNode, o: { used?: boolean } = {}): Promise<EdgeLoad> {
    return n.local ? await n.api.load(o) : n.load;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.refreshing?.catch(() => undefined);
    await Promise.all([...this.readers.values()].map((r) => r.reader.stop()));
    this.readers.clear();
    for (const n of this.nodes.values()) if (!n.local) (n.api as RemoteEdgeApi).disconnect();
  }
}
