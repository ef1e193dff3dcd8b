import type { ClusterNode } from '../cluster/cluster.js';
import type { PoolRecord } from '../store/store.js';

/** The nodes a pool's members may be on: ready, running containers, with a network if it needs one, large enough. */
export function poolNodes<N extends Pick<ClusterNode, 'id' | 'state' | 'info'>>(nodes: readonly N[], rec: Pick<PoolRecord, 'resources' | 'network'>): N[] {
  const net = rec.network.egress === 'allow' || rec.network.allow.length > 0 || (rec.network.endpoints?.length ?? 0) > 0;
  return nodes
    .filter(
      (n) =>
        n.state === 'ready' &&
        n.info.backends.some((b) => b.name === 'container') &&
        (!net || n.info.networking) &&
        (rec.network.endpoints ?? []).every((e) => n.info.endpoints?.includes(e)) &&
        rec.resources.cpu <= n.info.capacity.maxCpuPerSandbox &&
        rec.resources.memoryMiB <= n.info.capacity.maxMemoryMiBPerSandbox,
    )
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * Each node's share of a pool's size: the size spread evenly over the nodes (sorted by id), the
 * remainder to the nodes from an offset the pool's id picks (so pools' remainders spread too).
 * Every replica computes the same from the same nodes.
 */
export function poolShares(poolId: string, size: number, nodeIds: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  const n = nodeIds.length;
  if (!n) return out;
  let h = 0;
  for (let i = 0; i < poolId.length; i++) h = (h * 31 + poolId.charCodeAt(i)) >>> 0;
  const base = Math.floor(size / n);
  const rest = size % n;
  nodeIds.forEach((id, i) => out.set(id, base + ((i - (h % n) + n) % n < rest ? 1 : 0)));
  return out;
}
