import type { AuditEntry, CpuClass, KeyRole, NetworkPolicy, SandboxEndReason, SandboxState } from '@warren/api';
import type { CatalogueStore } from '@warren/images';
import type { LeaseStore } from './leases.js';
import type { EventStore } from './events.js';
import type { WebhookStore } from './webhooks.js';
import type { SandboxImageStore } from './sandbox-images.js';

/** A sandbox as the control plane keeps it. */
export interface SandboxRecord {
  id: string;
  tenant: string;
  node: string;
  state: SandboxState;
  backend: 'container' | 'microvm' | 'vm';
  image: string;
  layers: string[];
  layerNames: string[];
  labels: Record<string, string>;
  /** memoryMiB: the hard limit; memoryRequestMiB: what its node commits (absent in older records: the default share of memoryMiB). cpuClass: absent in records from before sandboxes had one (latency). */
  resources: { cpu: number; memoryMiB: number; memoryRequestMiB?: number; pids: number; diskMiB: number | null; cpuClass?: CpuClass };
  /** The create's env (what the caller asked for). */
  env: Record<string, string>;
  /** The image's own env at create (absent in records from before images carried one: none). */
  imageEnv?: Record<string, string>;
  user: string | null;
  workdir: string | null;
  createdAt: number;
  expiresAt: number | null;
  lastActivityAt: number;
  idleTimeoutSeconds: number | null;
  /** Absent in records from before sandboxes paused themselves. */
  pauseAfterIdleSeconds?: number | null;
  ttlCountsPaused?: boolean;
  error: { code: string; message: string } | null;
  requestId: string | null;
  /** Network rules as last set (absent in records from before sandboxes had networks). */
  network?: NetworkPolicy;
  /** The lease it lives under (absent or null: none). */
  lease?: string | null;
  /** Why and when (the control plane's clock) it ended; absent or null while it lives. */
  end?: SandboxEndRecord | null;
}

/** Why a sandbox ended, as kept (see SandboxEnd in the API). */
export interface SandboxEndRecord {
  reason: SandboxEndReason;
  detail: string | null;
  at: number;
}

/** An end now. */
export const endNow = (reason: SandboxEndReason, detail: string | null = null): SandboxEndRecord => ({ reason, detail, at: Date.now() });

export interface KeyRecord {
  hash: string;
  tenant: string;
  role: KeyRole;
  quota: { sandboxes?: number; cpu?: number; memoryMiB?: number; cidrMinPrefix?: number; snapshots?: number; cpuClass?: CpuClass };
  createdAt: number;
}

/** A warm pool as the control plane keeps it (its sandboxes live on the edge only until claimed). */
export interface PoolRecord {
  id: string;
  tenant: string;
  image: string;
  /** Layer digests, bottom first (the image's, then the extra ones). */
  layers: string[];
  layerNames: string[];
  resources: SandboxRecord['resources'];
  network: { egress: 'deny' | 'allow'; allow: string[]; deny: string[]; endpoints?: string[] };
  size: number;
  createdAt: number;
  /** The quota of the key that made it: its refills stay within it (absent in older records: none). */
  quota?: KeyRecord['quota'];
}

/**
 * How a node stands: `joining` while the control plane reconciles what it runs, `ready` takes
 * creates, `draining` keeps what it runs and takes none, `down` stopped answering.
 */
export type NodeState = 'joining' | 'ready' | 'draining' | 'down';

/**
 * A node as the control plane keeps it: where its edge is, what it promises and carries (from
 * its last heartbeat). Times are the store's own clock, so replicas and edges whose clocks
 * differ still agree on how long a node has been silent.
 */
export interface NodeRecord {
  /** The node's name (`warren edge --name`). */
  id: string;
  /** Where its edge protocol listens (`host:port`). */
  address: string;
  /** What a control plane presents to its edge. */
  token: string;
  /** The certificate its edge protocol's TLS is pinned to (SHA-256 fingerprint); null: plain TCP. */
  tlsFingerprint: string | null;
  /** Made anew each time the edge process starts: a heartbeat of another boot is refused. */
  boot: string;
  state: NodeState;
  /** What the edge said of itself when it joined (EdgeInfo) and carries now (EdgeLoad). */
  info: unknown;
  load: unknown;
  joinedAt: number;
  heartbeatAt: number;
  /** How long since its last heartbeat when it was read, by the store's clock (ms). */
  silentMs: number;
}

export interface ListFilter {
  tenant: string;
  labels?: Array<[string, string]>;
  state?: SandboxState;
  /** Only the sandboxes of this lease. */
  lease?: string;
  /** Only the sandboxes created from this image. */
  image?: string;
  /** Only records in one of these states. */
  states?: SandboxState[];
  limit: number;
  /** Id to continue after (ids sort by creation). */
  after?: string;
  /** Id to continue before (with order `desc`). */
  before?: string;
  /** By id, so by creation: `asc` (the default) or `desc`, newest first. */
  order?: 'asc' | 'desc';
}

/** A tenant's live sandboxes (creating, running, paused) and what they ask for. */
export interface TenantUsage {
  sandboxes: number;
  cpu: number;
  memoryMiB: number;
}

/**
 * The control plane's state: SQLite embedded, PostgreSQL in a cluster. Every call is async and is
 * one transaction of its own; what must be atomic is one call, so an implementation over a
 * network database runs each in a transaction (or one statement) and nothing spans two calls:
 * `insertSandbox` with its quota check, `putExecRequest`'s first writer, `appendAudit`'s batch.
 * The image and layer catalogue is in it too (CatalogueStore).
 */
export interface Store extends CatalogueStore {
  /** Leases (the store's own clock sets and checks their deadlines). */
  readonly leases: LeaseStore;
  /** Lifecycle events, per tenant, in order. */
  readonly events: EventStore;
  /** Webhooks' cursors in the events, and which replica sends to each. */
  readonly webhooks: WebhookStore;
  /** Which live sandboxes were created from which image. */
  readonly sandboxImages: SandboxImageStore;
  /**
   * Whether a write is done before its call returns (SQLite's, synchronous): then nothing is ever
   * in flight for a group write to gather behind, and it waits for the event loop's turn instead.
   */
  readonly writesInline?: boolean;
  /**
   * Records a new sandbox. With `admit`, in the same transaction as a read of its tenant's
   * live usage (without it): `admit` throws to refuse, and nothing is recorded. Concurrent
   * inserts with `admit` of one tenant see each other, so a burst cannot pass a quota together;
   * an insert without one (a key without a quota) takes no lock and counts nothing.
   */
  insertSandbox(r: SandboxRecord, o?: { admit?: (usage: TenantUsage) => void }): Promise<void>;
  /**
   * Records sandboxes at once (a batch create, or creates grouped while a write was in flight):
   * as insertSandbox, in one statement, all or none. With `admit` they are of one tenant, and it
   * sees the usage before all of them (it checks them as one).
   */
  insertSandboxes(rs: SandboxRecord[], o?: { admit?: (usage: TenantUsage) => void }): Promise<void>;
  /** Marks these sandboxes running, each only if it is still `creating`; answers those it marked. */
  markStarted(ids: string[]): Promise<string[]>;
  /**
   * Patches a sandbox's record; with `from`, only while its state is one of those (a state
   * change that must not undo a concurrent one: a resume must not bring back a deleted
   * sandbox). Answers whether it was patched.
   */
  updateSandbox(
    id: string,
    patch: Partial<Pick<SandboxRecord, 'state' | 'expiresAt' | 'lastActivityAt' | 'error' | 'network' | 'node' | 'end' | 'layers'>>,
    o?: { from?: SandboxState[] },
  ): Promise<boolean>;
  /**
   * Ends a sandbox in one write: its state (and error), if it is live (creating, running,
   * paused), and forgets its exec requestIds. Answers its record as it was before (undefined: no
   * such sandbox). With `tenant`, a sandbox of another tenant is left alone and answered undefined
   * (not found, to that tenant).
   */
  endSandbox(id: string, end: Pick<SandboxRecord, 'state' | 'error' | 'end'>, o?: { tenant?: string }): Promise<SandboxRecord | undefined>;
  /** Sandboxes' last activity times, in one write (those whose record is gone are skipped). */
  setActivity(entries: Array<{ id: string; at: number }>): Promise<void>;
  getSandbox(id: string): Promise<SandboxRecord | undefined>;
  findByRequestId(tenant: string, requestId: string): Promise<SandboxRecord | undefined>;
  listSandboxes(f: ListFilter): Promise<SandboxRecord[]>;
  /** Sandboxes in a live state on a node (running, paused, creating). */
  liveOnNode(node: string): Promise<SandboxRecord[]>;
  /**
   * Sandboxes still `creating` that were recorded more than `olderThanMs` ago (creates a control
   * plane never finished), at most `limit`. By the store's own clock, which recorded them: replicas'
   * clocks may differ, and one ahead must not take another's create in progress for cut off.
   */
  staleCreating(olderThanMs: number, limit: number): Promise<SandboxRecord[]>;
  tenantUsage(tenant: string): Promise<TenantUsage>;
  /** Every tenant's live sandboxes and what they ask for (for /metrics). */
  usageByTenant(): Promise<Array<TenantUsage & { tenant: string }>>;
  deleteSandbox(id: string): Promise<void>;
  /** The command that first carried an exec requestId in a sandbox, if any. */
  execRequest(sandboxId: string, requestId: string): Promise<string | undefined>;
  /** Remembers which command a requestId starts (first writer wins); whether this call was the first. */
  putExecRequest(sandboxId: string, requestId: string, commandId: string): Promise<boolean>;
  /** Forgets one requestId (its command could not be started). */
  deleteExecRequest(sandboxId: string, requestId: string): Promise<void>;
  /** Forgets a sandbox's exec requestIds (when it stops). */
  deleteExecRequests(sandboxId: string): Promise<void>;
  putPool(p: PoolRecord): Promise<void>;
  listPools(): Promise<PoolRecord[]>;
  deletePool(id: string): Promise<void>;
  putKey(k: KeyRecord): Promise<void>;
  /**
   * Records a node that (re)joins, its heartbeat now, `joining` (a drained one stays `draining`);
   * replaces what was kept under its name.
   */
  putNode(n: Omit<NodeRecord, 'heartbeatAt' | 'silentMs' | 'state' | 'joinedAt'>): Promise<void>;
  /**
   * Nodes' heartbeats, in one write: each one's load, now; per beat, false when no node of its id
   * and boot is up (it must join again).
   */
  heartbeatNodes(beats: Array<{ id: string; boot: string; load: unknown }>): Promise<boolean[]>;
  /** A control-plane replica says it is alive at `url` (by the store's clock), for its peers to find. */
  seeReplica(id: string, url: string): Promise<void>;
  /** The other replicas (not `except`) seen within `withinMs`. */
  liveReplicas(withinMs: number, except: string): Promise<Array<{ id: string; url: string }>>;
  listNodes(): Promise<NodeRecord[]>;
  getNode(id: string): Promise<NodeRecord | undefined>;
  /** Sets a node's state, with `from` only while it is one of those; whether it was set. */
  setNodeState(id: string, state: NodeState, o?: { from?: NodeState[] }): Promise<boolean>;
  /** Marks down the nodes silent for longer than `silentMs`; answers those this call marked (one caller wins each). */
  markNodesDown(silentMs: number): Promise<string[]>;
  /** Records the live sandboxes of a node as failed with `error` and `end`; answers their ids. */
  failLiveOnNode(node: string, error: { code: string; message: string }, end: SandboxEndRecord): Promise<string[]>;
  /** Appends audit entries (one transaction). */
  appendAudit(entries: AuditEntry[]): Promise<void>;
  /** The newest first. */
  listAudit(q: { limit: number; tenant?: string; sandbox?: string }): Promise<AuditEntry[]>;
  getKey(hash: string): Promise<KeyRecord | undefined>;
  /** Removes the key whose hash begins with `hashPrefix` (16 hex digits, what a keyId names); whether one was. */
  deleteKeyByPrefix(hashPrefix: string): Promise<boolean>;
  /** Round trips to the database so far (for /metrics; an embedded store has none). */
  roundTrips(): number;
  close(): Promise<void>;
}
