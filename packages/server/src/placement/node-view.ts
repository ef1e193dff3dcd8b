import { memoryRequestOf } from '@warren/api';
import type { EdgeLoad } from '@warren/edge';
import type { Cluster, NodeChange } from '../cluster/cluster.js';
import { placeAll, placeSandbox, type Placement, type PlacementNode, type PlacementRequest } from './policy.js';

/**
 * The nodes as placement sees them: each one's latest load (its heartbeat, or a create's answer
 * read later), plus the creates this replica has sent there and not heard back from. So a
 * burst spreads, and a view is never older than the last answer from the node. Kept up to date
 * in place as the cluster's table and loads change (one per replica: the creates in flight are
 * counted once).
 */
export class NodeView {
  /** Creates this replica sent to a node that have not answered yet: cpu, memory, sandboxes. */
  private readonly inFlight = new Map<string, { cpu: number; memoryMiB: number; sandboxes: number }>();
  private readonly views = new Map<string, PlacementNode>();
  private list: PlacementNode[] | null = null;

  constructor(private readonly cluster: Pick<Cluster, 'all' | 'find' | 'watch' | 'offerLoad'>) {
    cluster.watch((id, change) => this.changed(id, change));
    for (const n of cluster.all()) this.update(n.id);
  }

  /** Where a create goes first (see placeSandbox): a sample of the nodes. */
  place(r: PlacementRequest, o: { k?: number; random?: () => number } = {}): Placement {
    return placeSandbox(this.nodes(), r, o);
  }

  /** Every node that may take a create, best first, but those in `skip` (see placeAll). */
  placeAll(r: PlacementRequest, skip?: ReadonlySet<string>): Placement {
    return placeAll(this.nodes(), r, skip);
  }

  /** A create sent to a node (`sign` 1) or answered there (-1), with the load its answer carried. */
  inFlightOn(node: string, r: { cpu: number; memoryMiB: number; memoryRequestMiB?: number }, sign: 1 | -1, load?: EdgeLoad): void {
    const p = this.inFlight.get(node) ?? { cpu: 0, memoryMiB: 0, sandboxes: 0 };
    p.cpu += sign * r.cpu;
    // What the node commits for it: its request.
    p.memoryMiB += sign * memoryRequestOf(r);
    p.sandboxes += sign;
    this.inFlight.set(node, p);
    // A fresher load updates the view through the cluster's watch; otherwise the count alone changed.
    if (!load || !this.cluster.offerLoad(node, load)) this.update(node);
  }

  private nodes(): PlacementNode[] {
    this.list ??= [...this.views.values()];
    return this.list;
  }

  private changed(id: string, change: NodeChange): void {
    if (change === 'left') {
      this.views.delete(id);
      this.inFlight.delete(id);
      this.list = null;
      return;
    }
    // A new boot answers none of the creates sent to the one before.
    if (change === 'restarted') this.inFlight.delete(id);
    this.update(id);
  }

  /** A node as placement sees it, updated in place. */
  private update(id: string): void {
    const n = this.cluster.find(id);
    if (!n) return;
    const p = this.inFlight.get(id);
    const v: PlacementNode = {
      id: n.id,
      state: n.state,
      local: n.local,
      backends: n.info.backends.map((b) => b.name),
      networking: n.info.networking,
      endpoints: n.info.endpoints,
      capacity: n.info.capacity,
      committed: { cpu: n.load.committed.cpu + (p?.cpu ?? 0), memoryMiB: n.load.committed.memoryMiB + (p?.memoryMiB ?? 0) },
      sandboxes: n.load.sandboxes + (p?.sandboxes ?? 0),
      paused: n.load.paused,
      cpuUsed: n.load.used?.cpu ?? 0,
    };
    const cur = this.views.get(id);
    if (cur) Object.assign(cur, v);
    else {
      this.views.set(id, v);
      this.list = null;
    }
  }
}
