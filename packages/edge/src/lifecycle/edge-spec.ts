import type { FnGroupSpec, FnWorkersOptions } from '../fn/fn-workers.js';
import type { CpuClass, NetworkPolicy, NetworkUsage } from '@warren/api';
import type { Backend, SandboxStats } from '../backends/backend.js';
import type { SandboxNetwork } from '../net/sandbox-network.js';
import type { EdgeCapacity } from './admission.js';
import type { EdgeLease } from './leases.js';

/** What the edge must know of a sandbox to run, police and recover it. */
export interface EdgeSandboxSpec {
  id: string;
  layers: string[];
  /**
   * memoryMiB: the hard limit; memoryRequestMiB: what admission commits for it (absent: the
   * default share of the limit, memoryRequestOf); diskMiB: the writable layer's limit (null or
   * absent: none; only on a node with disk quotas). cpuClass: how its CPU time is shared (absent:
   * latency; see CpuClass in the API).
   */
  resources: { cpu: number; memoryMiB: number; memoryRequestMiB?: number; pids: number; diskMiB?: number | null; cpuClass?: CpuClass };
  env: Record<string, string>;
  user: string | null;
  workdir: string | null;
  expiresAtMs: number | null;
  idleTimeoutMs: number | null;
  lastActivityMs: number;
  paused: boolean;
  /** Its network rules (default: nothing leaves). */
  network?: NetworkPolicy;
  /** Paused (frozen, memory reclaimed) after this long without activity; null or absent: never. */
  pauseAfterIdleMs?: number | null;
  /** Whether time spent paused counts against the TTL (default: it does not). */
  ttlCountsPaused?: boolean;
  /** A FnCall worker: no network, and it runs only {@link Edge.fnCall}s. */
  fn?: boolean;
  /** The backend that runs it, by name (default: the node's first). */
  backend?: string;
  /** Whose sandbox it is: its commands' output is held within that tenant's share of the node's budget. */
  tenant?: string;
  /** The lease it lives under: frozen here once the lease lapses. */
  lease?: EdgeLease | null;
}

/** A live sandbox as the edge sees it now (`usage`: only when asked for; `network`: null without networking). */
export interface EdgeSandboxState {
  id: string;
  paused: boolean;
  lastActivityMs: number;
  expiresAtMs: number | null;
  usage: (SandboxStats & { cpuRecent: number; idleSeconds: number }) | null;
  network: {
    policy: { egress: 'deny' | 'allow'; allow: string[]; deny: string[]; endpoints?: string[] };
    address: string | null;
    usage: NetworkUsage | null;
  } | null;
}

export interface EdgeOptions {
  nodeId: string;
  /** The backends this node runs, by name; the first is the one a spec that names none gets. */
  backends: Backend[];
  capacity: EdgeCapacity;
  logger?: { warn(msg: string, meta?: unknown): void };
  maxFileBytes?: number;
  commandRetentionMs?: number;
  /** Command output held for all sandboxes together, in bytes (default: an eighth of memory, at most 4 GiB). */
  maxRetainedOutputBytes?: number;
  /** Sandbox networking; without it every sandbox has loopback only and no rules can open more. */
  network?: SandboxNetwork;
  /** For fault-injection tests only: called at named steps (`commit:frozen`), where the test's process kills itself. */
  failpoint?: (step: string) => void;
  /**
   * Memory the node keeps available (MiB, memoryAvailableMiB): below it, idle sandboxes are
   * paged out and then the longest-idle ones paused (MemoryPressure), and a create needs its
   * request available above it. Default: 5 % of the node's memory, at least 512 MiB; 0 turns
   * both off.
   */
  memoryFloorMiB?: number;
  /**
   * Memory available to the node's sandboxes now, MiB (default: /proc/meminfo MemAvailable): a
   * node whose sandboxes share a cgroup with a limit gives the lesser of that and the limit's room.
   */
  memoryAvailableMiB?: () => Promise<number>;
  /** The clock (default Date.now): tests advance their own. */
  now?: () => number;
  /** How often the sweep runs (TTLs, idle timeouts, dead sandboxes, CPU samples; ms, default 1000). */
  sweepMs?: number;
  /** The node's FnCall workers: how many, how long kept idle, the calls that may wait. */
  fn?: Omit<FnWorkersOptions, 'logger'>;
}

/** A sandbox made ahead for nobody yet (a FnCall worker, a pool's member): no env, user, workdir or lifetime. */
export function unclaimedSpec(
  id: string,
  layers: string[],
  resources: EdgeSandboxSpec['resources'],
  now: number,
  more: Partial<EdgeSandboxSpec>,
): EdgeSandboxSpec {
  return { id, layers, resources, env: {}, user: null, workdir: null, expiresAtMs: null, idleTimeoutMs: null, lastActivityMs: now, paused: false, ...more };
}

/** A FnCall worker of group `g`: a container sandbox that runs only FnCalls, no network. */
export const fnWorkerSpec = (id: string, g: FnGroupSpec, now: number): EdgeSandboxSpec => unclaimedSpec(id, g.layers, g.resources, now, { fn: true });
