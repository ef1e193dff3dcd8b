import type { NetworkPolicy } from '@warren/api';
import type { Backend } from '../backends/backend.js';
import type { SandboxNetwork } from '../net/sandbox-network.js';
import type { EdgeCapacity } from './admission.js';

/** What the edge must know of a sandbox to run, police and recover it. */
export interface EdgeSandboxSpec {
  id: string;
  layers: string[];
  /** diskMiB: the writable layer's limit (null or absent: none; only on a node with disk quotas). */
  resources: { cpu: number; memoryMiB: number; pids: number; diskMiB?: number | null };
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
  /** Whose sandbox it is: its commands' output is held within that tenant's share of the node's budget. */
  tenant?: string;
}

export interface EdgeOptions {
  nodeId: string;
  backend: Backend;
  capacity: EdgeCapacity;
  /** Called when a sandbox's TTL or idle timeout has passed; the owner deletes it. */
  onExpired: (id: string, reason: 'ttl' | 'idle') => void;
  /** Called when a sandbox's processes died under it (e.g. its init was OOM-killed); the owner marks it failed. */
  onDied: (id: string) => void;
  logger?: { warn(msg: string, meta?: unknown): void };
  maxFileBytes?: number;
  commandRetentionMs?: number;
  /** Command output held for all sandboxes together, in bytes (default: an eighth of memory, at most 4 GiB). */
  maxRetainedOutputBytes?: number;
  /** Sandbox networking; without it every sandbox has loopback only and no rules can open more. */
  network?: SandboxNetwork;
  /**
   * Told whenever a sandbox is paused or resumed, also by the edge itself (idle, memory pressure,
   * a call on a paused sandbox), with its TTL deadline (moved on by the time it was paused).
   */
  onStateChanged?: (id: string, s: { paused: boolean; expiresAtMs: number | null }) => void;
  /**
   * Memory the node keeps available (MiB, /proc/meminfo MemAvailable): below it, the
   * longest-idle running sandboxes are paused (and their memory reclaimed) one by one. Default:
   * 5 % of the node's memory, at least 512 MiB; 0 turns it off.
   */
  memoryFloorMiB?: number;
  /** The clock (default Date.now): tests advance their own. */
  now?: () => number;
}
