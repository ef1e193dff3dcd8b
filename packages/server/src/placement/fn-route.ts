import type { FnLoad } from '@warren/edge';

/** What routing a call reads of a node. */
export interface FnRouteNode {
  id: string;
  info: { capacity: { maxCpuPerSandbox: number; maxMemoryMiBPerSandbox: number; cpu: number } };
  load: { committed: { cpu: number }; fn?: FnLoad };
}

/**
 * The node a FnCall goes to: the one with the most free warm workers of its group (its last
 * load's idle workers less the calls this replica has sent there since), else the one with the
 * least of that group waiting and in flight (it starts a worker: a cold start), the least
 * committed CPU breaking ties. Nodes in `skip` (tried already) and those that cannot hold a
 * worker of this size are left out; null when none is left.
 */
export function pickFnNode<N extends FnRouteNode>(
  nodes: readonly N[],
  key: string,
  r: { cpu: number; memoryMiB: number },
  inFlight: ReadonlyMap<string, ReadonlyMap<string, number>>,
  skip: ReadonlySet<string>,
): N | null {
  let best: N | null = null;
  let bestIdle = 0;
  let bestBacklog = Infinity;
  let bestCpu = Infinity;
  for (const n of nodes) {
    if (skip.has(n.id)) continue;
    const cap = n.info.capacity;
    if (r.cpu > cap.maxCpuPerSandbox || r.memoryMiB > cap.maxMemoryMiBPerSandbox) continue;
    const g = n.load.fn?.groups.find((x) => x.key === key);
    const sent = inFlight.get(n.id)?.get(key) ?? 0;
    const idle = (g ? g.workers - g.busy : 0) - sent;
    const backlog = (g?.queued ?? 0) + Math.max(0, sent - (g ? g.workers - g.busy : 0));
    const cpu = cap.cpu > 0 ? n.load.committed.cpu / cap.cpu : 0;
    const better =
      idle > 0
        ? idle > bestIdle || (idle === bestIdle && cpu < bestCpu)
        : bestIdle <= 0 && (backlog < bestBacklog || (backlog === bestBacklog && cpu < bestCpu));
    if (better || best === null) {
      best = n;
      bestIdle = Math.max(0, idle);
      bestBacklog = backlog;
      bestCpu = cpu;
    }
  }
  return best;
}
