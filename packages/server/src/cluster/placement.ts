import { WarrenError } from '@warren/api';
import { checkAdmission, type EdgeCapacity } from '@warren/edge';

/** A node as placement sees it: the node table's view (its last heartbeat, plus what this replica placed since). */
export interface PlacementNode {
  id: string;
  state: 'joining' | 'ready' | 'draining' | 'down';
  backends: string[];
  networking: boolean;
  capacity: EdgeCapacity;
  /** What admission counts on it (running sandboxes' requests, paused ones' resident memory). */
  committed: { cpu: number; memoryMiB: number };
  sandboxes: number;
  paused: number;
  /** Cores its sandboxes used lately. */
  cpuUsed: number;
  /** An edge in this process: its own admission answers at once, so no stale view is checked. */
  local?: boolean;
}

/** What a create asks of a node. */
export interface PlacementRequest {
  backend: string;
  cpu: number;
  memoryMiB: number;
  diskMiB?: number | null;
  /** Whether the sandbox needs a network beyond loopback. */
  network: boolean;
}

/** The nodes a create may try, best first, and why each other node may not take it. */
export interface Placement {
  order: string[];
  refused: Record<string, string>;
}

/**
 * How good a node is for one more sandbox: the share of its memory and of its busy-CPU bound
 * left after it, memory weighted more (memory is what cannot be shared). Higher is better.
 */
export function placementScore(n: PlacementNode, r: PlacementRequest): number {
  const mem = 1 - (n.committed.memoryMiB + r.memoryMiB) / n.capacity.memoryMiB;
  const cpu = n.capacity.busyCpu ? 1 - n.cpuUsed / n.capacity.busyCpu : 1;
  return mem + 0.5 * cpu;
}

/**
 * Where a create goes: of the nodes that can take it by the table's view (ready, with the
 * backend, with room by the edge's own admission rule), the best of `k` sampled at random first
 * (power of k choices: as balanced as comparing all, without every replica herding onto the same
 * emptiest node between two heartbeats), then the others, best first, to retry on when an edge
 * refuses on its fresher view. Pure; `random` is injected.
 */
export function placeSandbox(nodes: PlacementNode[], r: PlacementRequest, o: { k?: number; random?: () => number } = {}): Placement {
  const k = o.k ?? 2;
  const random = o.random ?? Math.random;
  const refused: Record<string, string> = {};
  const fit: Array<{ id: string; score: number }> = [];
  /** Nodes the view says are full (they are up and run the backend). */
  const full: Array<{ id: string; score: number }> = [];
  for (const n of nodes) {
    const why = unfit(n, r);
    if (why === null) fit.push({ id: n.id, score: placementScore(n, r) });
    else {
      refused[n.id] = why.reason;
      if (why.full) full.push({ id: n.id, score: placementScore(n, r) });
    }
  }
  // Every node full by the view: the view lags (deletes show at the next heartbeat), so the
  // least loaded few are asked anyway; their own admission has the last word.
  if (!fit.length) return { order: full.sort((a, b) => b.score - a.score).slice(0, FULL_TRIES).map((x) => x.id), refused };
  // Sample k without replacement (a partial Fisher-Yates shuffle), keep the best of them first.
  for (let i = 0; i < Math.min(k, fit.length); i++) {
    const j = i + Math.floor(random() * (fit.length - i));
    [fit[i], fit[j]] = [fit[j]!, fit[i]!];
  }
  const sampled = fit.slice(0, k).sort((a, b) => b.score - a.score);
  const rest = fit.slice(k).sort((a, b) => b.score - a.score);
  return { order: [...sampled, ...rest].map((x) => x.id), refused };
}

/** Nodes a create is tried on when the view says every node is full. */
const FULL_TRIES = 3;

/** Why a node cannot take the request by the table's view (null: it can); `full`: only for want of room. */
function unfit(n: PlacementNode, r: PlacementRequest): { reason: string; full: boolean } | null {
  if (n.state !== 'ready') return { reason: `the node is ${n.state}`, full: false };
  if (!n.backends.includes(r.backend)) return { reason: `it does not run the ${r.backend} backend`, full: false };
  if (r.network && !n.networking) return { reason: 'its sandboxes have loopback only', full: false };
  if (n.local) return null;
  try {
    checkAdmission(n.id, n.capacity, { ...n.committed, sandboxes: n.sandboxes, paused: n.paused, cpuUsed: n.cpuUsed }, r);
    return null;
  } catch (e) {
    if (e instanceof WarrenError) return { reason: e.message, full: true };
    throw e;
  }
}
