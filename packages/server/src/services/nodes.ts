import type { JoinNodeRequest, JoinNodeResponse, ListNodesResponse } from '@warren/api';
import { WarrenError } from '@warren/api';
import type { BlockList } from 'node:net';
import { hostAddresses, type EdgeApi, type EdgeInfo, type EdgeLoad, type FnLoad, type RemoteEdgeApi } from '@warren/edge';
import { connectEdge, type Cluster, type ClusterNode } from '../cluster/cluster.js';
import { within } from '../cluster/within.js';
import { DEFAULT_EDGE_NETWORKS, edgeNetworks, joinTarget } from '../cluster/join-address.js';
import type { Store } from '../store/store.js';
import { GroupWrite } from './group-write.js';
import type { SandboxService } from './sandboxes.js';
import { fnGauges } from './fn.js';

export interface NodeServiceOptions {
  /** How often an edge sends its heartbeat (ms). */
  heartbeatMs: number;
  /** A node silent this long is down (ms). */
  downAfterMs: number;
  /** What a joining edge is told to read layers it lacks from (the cluster's blob store), if any. */
  blobStore?: () => JoinNodeResponse['blobStore'];
  /** Where the local node's edge is reached (`warren up`; known once the server listens). */
  localAddress: () => string;
  /** The networks a joining edge's address must be in (default DEFAULT_EDGE_NETWORKS). */
  edgeNetworks?: readonly string[];
  /** Joins of edges that do not speak TLS (no certificate fingerprint) are refused. */
  requireEdgeTls?: boolean;
  /** The control plane's own hosts (its replicas, the database), by address or name: a joining node keeps its sandboxes from them, and from the other nodes. */
  clusterHosts?: () => Promise<string[]>;
  /** A node that joined asks for FnCall workers kept warm (its own --fn-pool). */
  onFnPools?: (node: string, pools: NonNullable<JoinNodeRequest['fnPools']>) => void;
  logger: { info(msg: string, meta?: unknown): void; warn(msg: string, meta?: unknown): void };
}

/** The nodes that run sandboxes: joining, heartbeats, drain, and what they promise and carry. */
export class NodeService {
  private readonly beats: GroupWrite<{ id: string; boot: string; load: EdgeLoad }, boolean>;
  private readonly allowed: BlockList;

  constructor(
    private readonly store: Store,
    private readonly cluster: Cluster,
    private readonly sandboxes: SandboxService,
    private readonly o: NodeServiceOptions,
  ) {
    this.allowed = edgeNetworks(o.edgeNetworks ?? DEFAULT_EDGE_NETWORKS);
    const lingerMs = Math.min(100, o.heartbeatMs / 10);
    this.beats = new GroupWrite(async (beats) => (await store.heartbeatNodes(beats)).map((value) => ({ status: 'fulfilled', value })), {
      linger: () => new Promise((r) => setTimeout(r, lingerMs)),
    });
  }

  /**
   * An edge joins (or joins again after a restart or after it was down): the control plane
   * reaches it at the address it gives, checks it is who it says, records it `joining`, makes the
   * store and the edge agree on its sandboxes (SandboxService.reconcile), then marks it ready. A
   * name another live edge holds is refused (conflict), unless that edge no longer answers as
   * itself. The address must be in the edge networks (its name resolved once, and that address
   * recorded): nothing else is dialled. A failure says what the control plane found, never what
   * the other end said (that goes to the log): a join is no way to read the network from here.
   */
  async join(req: JoinNodeRequest): Promise<JoinNodeResponse> {
    const address = await joinTarget(req.address, this.allowed);
    const prev = await this.store.getNode(req.name);
    if (prev && prev.boot !== req.boot && prev.state !== 'down' && prev.silentMs < this.o.downAfterMs) {
      const old = connectEdge(prev.address, prev.token, prev.tlsFingerprint);
      const alive = await within(2000, 'the edge', old.info())
        .then((i) => i.boot === prev.boot)
        .catch(() => false)
        .finally(() => old.disconnect());
      if (alive) throw new WarrenError('conflict', `a node named "${req.name}" is already in the cluster, at ${prev.address}`, { node: req.name });
    }
    if (this.o.requireEdgeTls && !req.tlsFingerprint)
      throw new WarrenError('permission_denied', 'this control plane takes edges that speak TLS only: start the edge with --tls', { node: req.name });
    const edge = connectEdge(address, req.token, req.tlsFingerprint ?? null);
    let info: EdgeInfo;
    let load: EdgeLoad;
    try {
      info = await within(5000, `the edge at ${address}`, edge.info());
      load = await within(5000, `the edge at ${address}`, edge.load({ used: true }));
    } catch (e) {
      this.o.logger.warn('a joining edge could not be reached', { node: req.name, address, error: String(e) });
      throw new WarrenError('unavailable', `cannot reach a joining edge at ${req.address}`, { address: req.address });
    } finally {
      edge.disconnect();
    }
    if (info.nodeId !== req.name || info.boot !== req.boot) {
      this.o.logger.warn('a joining edge answered as another', { node: req.name, address, answered: { node: info.nodeId, boot: info.boot } });
      throw new WarrenError('invalid_argument', `the edge at ${req.address} does not answer as "${req.name}" (boot ${req.boot})`, { address: req.address });
    }
    await this.store.putNode({ id: req.name, address, token: req.token, tlsFingerprint: req.tlsFingerprint ?? null, boot: req.boot, info, load });
    await this.cluster.refreshNow();
    const r = await this.sandboxes.sync.reconcile(req.name);
    await this.store.setNodeState(req.name, 'ready', { from: ['joining'] });
    await this.cluster.refreshNow();
    this.o.logger.info('a node joined', { node: req.name, address, ...r });
    this.sandboxes.queue.poke();
    if (req.fnPools?.length) this.o.onFnPools?.(req.name, req.fnPools);
    return {
      node: req.name,
      heartbeatMs: this.o.heartbeatMs,
      downAfterMs: this.o.downAfterMs,
      blobStore: this.o.blobStore?.() ?? null,
      reconciled: r,
      clusterHosts: await this.clusterHosts(),
    };
  }

  /** The cluster's hosts by address: the control plane's (its replicas, the database) and every node's. */
  private async clusterHosts(): Promise<string[]> {
    const own = await (this.o.clusterHosts?.() ?? Promise.resolve([])).catch((e: unknown) => {
      this.o.logger.warn('the cluster’s own hosts could not be listed for a joining node', { error: String(e) });
      return [];
    });
    const nodes = this.cluster.all().flatMap((n) => (n.local ? [] : [n.address.slice(0, n.address.lastIndexOf(':'))]));
    return hostAddresses([...own, ...nodes]);
  }

  /**
   * An edge's heartbeat; conflict when the node must join again (down meanwhile, or another boot).
   * Heartbeats that come within a tenth of the heartbeat period go to the store in one write (a
   * node's heartbeat waits that long for its answer; with 160 nodes a second, 10 writes instead of 160).
   */
  async heartbeat(id: string, boot: string, load: EdgeLoad): Promise<void> {
    if (!(await this.beats.add({ id, boot, load })))
      throw new WarrenError('conflict', `node ${id} must join again (it was marked down, or it restarted)`, { node: id });
  }

  /** Stops placements on a node (its sandboxes run on); `ready` again undoes it. */
  async setDraining(id: string, draining: boolean): Promise<void> {
    const n = this.cluster.all().find((x) => x.id === id);
    if (n?.local) throw new WarrenError('invalid_argument', 'the node of a single-node Warren (warren up) cannot be drained', { node: id });
    const ok = draining
      ? await this.store.setNodeState(id, 'draining', { from: ['ready', 'joining'] })
      : await this.store.setNodeState(id, 'ready', { from: ['draining'] });
    if (!ok) {
      const cur = await this.store.getNode(id);
      if (!cur) throw new WarrenError('not_found', `no node ${id}`, { node: id });
      throw new WarrenError('conflict', `node ${id} is ${cur.state}`, { node: id, state: cur.state });
    }
    await this.cluster.refreshNow();
  }

  async list(): Promise<ListNodesResponse> {
    const all = this.cluster.all().sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return { nodes: await Promise.all(all.map((n) => this.show(n))) };
  }

  private async show(n: ClusterNode): Promise<ListNodesResponse['nodes'][number]> {
    const cap = n.info.capacity;
    // The local node's load is read now; the others' is their last heartbeat's.
    const load = await this.cluster.loadOf(n, { used: true });
    return {
      id: n.id,
      address: n.local ? this.o.localAddress() : n.address,
      state: n.state,
      capacity: { cpu: cap.cpu, busyCpu: cap.busyCpu ?? null, memoryMiB: cap.memoryMiB, sandboxes: cap.sandboxes },
      allocated: load.requested,
      committed: load.committed,
      used: load.used ?? { cpu: 0, memoryMiB: 0, swapMiB: 0 },
      sandboxes: load.sandboxes,
      paused: load.paused,
      backends: n.info.backends.map((b) => b.name),
      byBackend: load.byBackend ?? {},
      fn: fnView(load.fn),
      pools: load.pools ?? [],
      lastHeartbeatAt: new Date(n.local ? Date.now() : n.heartbeatAt).toISOString(),
      clockOffsetMs: n.local ? 0 : ((n.api as Partial<RemoteEdgeApi>).clockOffsetMs?.() ?? null),
      tlsFingerprint: n.tlsFingerprint,
    };
  }

  /** The backends a create may name, with whether a node runs each (Warren knows three). */
  backends(): Array<{ name: string; available: boolean; accelerator: string | null }> {
    const have = this.cluster.backends();
    const described = this.cluster.up().flatMap((n) => n.info.backends);
    return (['container', 'microvm', 'vm'] as const).map((name) => ({
      name,
      available: have.has(name),
      accelerator: described.find((b) => b.name === name)?.accelerator ?? null,
    }));
  }

  /** The endpoint names a create may ask for (some node that is not down offers each), sorted. */
  endpoints(): string[] {
    return [...this.cluster.endpoints()].sort();
  }

  /** The nodes' gauges (per node, and the cluster's totals) and per-sandbox network counters, Prometheus text. */
  async metrics(): Promise<string> {
    const up = this.cluster.up();
    const loads = await Promise.all(up.map(async (n) => [n, await this.cluster.loadOf(n)] as const));
    let sandboxes = 0;
    let cpu = 0;
    let mem = 0;
    const per: string[] = [];
    for (const [n, l] of loads) {
      sandboxes += l.sandboxes;
      cpu += l.committed.cpu;
      mem += l.committed.memoryMiB;
      per.push(`warren_node_sandboxes{node="${n.id}"} ${l.sandboxes}`, `warren_node_committed_memory_mib{node="${n.id}"} ${l.committed.memoryMiB}`);
    }
    const states = new Map<string, number>();
    for (const n of this.cluster.all()) states.set(n.state, (states.get(n.state) ?? 0) + 1);
    const net = await Promise.all(up.map((n) => this.networkMetrics(n.api)));
    const tenants = await this.store.usageByTenant();
    const routing = this.sandboxes.routing;
    const label = (t: string): string => t.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`));
    const perTenant = tenants.flatMap((t) => [
      `warren_tenant_sandboxes{tenant="${label(t.tenant)}"} ${t.sandboxes}`,
      `warren_tenant_cpu{tenant="${label(t.tenant)}"} ${t.cpu}`,
      `warren_tenant_memory_mib{tenant="${label(t.tenant)}"} ${t.memoryMiB}`,
    ]);
    return (
      `# TYPE warren_sandboxes gauge\nwarren_sandboxes ${sandboxes}\n` +
      `# TYPE warren_allocated_cpu gauge\nwarren_allocated_cpu ${cpu}\n` +
      `# TYPE warren_allocated_memory_mib gauge\nwarren_allocated_memory_mib ${mem}\n` +
      `# TYPE warren_nodes gauge\n${[...states].map(([s, k]) => `warren_nodes{state="${s}"} ${k}`).join('\n')}\n` +
      `# TYPE warren_node_sandboxes gauge\n# TYPE warren_node_committed_memory_mib gauge\n${per.join('\n')}\n` +
      `# TYPE warren_creates_waiting gauge\nwarren_creates_waiting ${this.sandboxes.queue.waiting}\n` +
      `# TYPE warren_placements_total counter\nwarren_placements_total ${this.sandboxes.placer.counts.created}\n` +
      `# TYPE warren_placement_retries_total counter\nwarren_placement_retries_total ${this.sandboxes.placer.counts.retried}\n` +
      `# TYPE warren_store_round_trips_total counter\nwarren_store_round_trips_total ${this.store.roundTrips()}\n` +
      `# TYPE warren_sandbox_routes gauge\nwarren_sandbox_routes ${routing.routes}\n` +
      `# TYPE warren_sandbox_calls_total counter\nwarren_sandbox_calls_total{route="known"} ${routing.routed}\nwarren_sandbox_calls_total{route="read"} ${routing.read}\n` +
      `# TYPE warren_sandbox_ends_total counter\n${[...this.sandboxes.ended].map(([r, n]) => `warren_sandbox_ends_total{reason="${r}"} ${n}\n`).join('')}` +
      `# TYPE warren_tenant_sandboxes gauge\n# TYPE warren_tenant_cpu gauge\n# TYPE warren_tenant_memory_mib gauge\n${perTenant.join('\n')}\n` +
      net.join('')
    );
  }

  /** A node's network counters (none from a node that does not answer now). */
  private networkMetrics(edge: EdgeApi): Promise<string> {
    return within(2000, 'the edge', edge.networkMetrics()).catch(() => '');
  }
}

/** A node's FnCall workers as /v1/nodes shows them. */
function fnView(f: FnLoad | undefined): ListNodesResponse['nodes'][number]['fn'] {
  if (!f) return { workers: 0, busy: 0, queued: 0, calls: 0, coldStarts: 0, queuedMs: 0, images: [] };
  return {
    ...fnGauges(f),
    calls: f.calls,
    coldStarts: f.coldStarts,
    queuedMs: f.queuedMs,
    images: f.groups.map((g) => ({ image: g.image, workers: g.workers, busy: g.busy, queued: g.queued })),
  };
}
