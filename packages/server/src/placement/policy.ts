import { memoryRequestOf } from '@warren/api';
import { admissionRefusal, type EdgeCapacity } from '@warren/edge';

/** A node as placement sees it: the latest load the replica saw of it (a heartbeat or a create's answer), plus its creates in flight there. */
export interface PlacementNode {
  id: string;
  state: 'joining' | 'ready' | 'draining' | 'down';
  backends: string[];
  networking: boolean;
  /** The operator's endpoints it offers, by name (absent: none). */
  endpoints?: readonly string[];
  capacity: EdgeCapacity;
  /** What admission counts on it (running sandboxes' requests, paused ones' resident memory up to their requests). */
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
  /** The sandbox's memory limit, and what a node commits for it (absent: the default share of the limit). */
  memoryMiB: number;
  memoryRequestMiB?: number;
  diskMiB?: number | null;
  /** Whether the sandbox needs a network beyond loopback. */
  network: boolean;
  /** The operator's endpoints its rules name: a node must offer each. */
  endpoints?: readonly string[];
}

/** The nodes a create may try, best first, and why each other node may not take it. */
export interface Placement {
  order: string[];
  refused: Record<string, string>;
  /** Whether every node was looked at (else `order` holds the sampled ones only: placeAll finds the rest). */
  complete: boolean;
  request: PlacementRequest;
}

/**
 * How good a node is for one more sandbox: the share of its memory and of its busy-CPU bound
 * left after it, memory weighted more (memory is what cannot be shared). Higher is better.
 */
export function placementScore(n: PlacementNode, r: PlacementRequest): number {
  const mem = 1 - (n.committed.memoryMiB + memoryRequestOf(r)) / n.capacity.memoryMiB;
  const cpu = n.capacity.busyCpu ? 1 - n.cpuUsed / n.capacity.busyCpu : 1;
  return mem + 0.5 * cpu;
}

/**
 * Where a create goes first: `k` nodes sampled at random, the best of those that can take it by
 * the table's view (ready, with the backend, with room by the edge's own admission rule) first —
 * power of k choices: as balanced as comparing all, without every replica herding onto the same
 * emptiest node between two heartbeats, and a few microseconds however many nodes there are.
 * When none of the sample can take it, every node is looked at (placeAll). Pure; `random` is
 * injected.
 */
export function placeSandbox(nodes: readonly PlacementNode[], r: PlacementRequest, o: { k?: number; random?: () => number } = {}): Placement {
  const k = Math.min(o.k ?? 2, nodes.length);
  const random = o.random ?? Math.random;
  const picked: Array<{ id: string; score: number }> = [];
  const seen = new Set<number>();
  while (seen.size < k) {
    const i = Math.floor(random() * nodes.length);
    if (seen.has(i)) continue;
    seen.add(i);
    const n = nodes[i]!;
    if (unfit(n, r) === null) picked.push({ id: n.id, score: placementScore(n, r) });
  }
  if (!picked.length) return placeAll(nodes, r);
  return { order: picked.sort((a, b) => b.score - a.score).map((x) => x.id), refused: {}, complete: false, request: r };
}

/**
 * Every node that can take a create by the table's view, best first (`skip`: nodes tried
 * already), and why each other may not. When the view says every node is full, the least loaded
 * few that are up are asked anyway: the view lags (deletes show at the next heartbeat), and their
 * own admission has the last word.
 */
export function placeAll(nodes: readonly PlacementNode[], r: PlacementRequest, skip: ReadonlySet<string> = new Set()): Placement {
  const refused: Record<string, string> = {};
  const fit: Array<{ id: string; score: number }> = [];
  /** Nodes the view says are full (they are up and run the backend). */
  const full: Array<{ id: string; score: number }> = [];
  for (const n of nodes) {
    if (skip.has(n.id)) continue;
    const why = unfit(n, r);
    if (why === null) fit.push({ id: n.id, score: placementScore(n, r) });
    else {
      refused[n.id] = why.reason;
      if (why.full) full.push({ id: n.id, score: placementScore(n, r) });
    }
  }
  const best = (xs: Array<{ id: string; score: number }>): string[] => xs.sort((a, b) => b.score - a.score).map((x) => x.id);
  return { order: fit.length ? best(fit) : best(full).slice(0, FULL_TRIES), refused, complete: true, request: r };
}

/** Nodes a create is tried on when the view says every node is full. */
const FULL_TRIES = 3;

/** Why a node cannot take the request by the table's view (null: it can); `full`: only for want of room. */
function unfit(n: PlacementNode, r: PlacementRequest): { reason: string; full: boolean } | null {
  if (n.state !== 'ready') return { reason: `the node is ${n.state}`, full: false };
  if (!n.backends.includes(r.backend)) return { reason: `it does not run the ${r.backend} backend`, full: false };
  if (r.network && !n.networking) return { reason: 'its sandboxes have loopback only', full: false };
  const missing = r.endpoints?.find((e) => !n.endpoints?.includes(e));
  if (missing !== undefined) return { reason: `it has no endpoint named "${missing}"`, full: false };
  if (n.local) return null;
  const s = { cpu: n.committed.cpu, memoryMiB: n.committed.memoryMiB, sandboxes: n.sandboxes, paused: n.paused, cpuUsed: n.cpuUsed };
  const refusal = admissionRefusal(n.id, n.capacity, s, r);
  return refusal ? { reason: refusal.message, full: true } : null;
}
