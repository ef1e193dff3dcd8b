import { z } from 'zod';
import { CpuClass } from './sandbox.js';

export const Quota = z.strictObject({
  sandboxes: z.number().int().min(0).optional(),
  cpu: z.number().min(0).optional(),
  memoryMiB: z.number().int().min(0).optional(),
  /** Snapshots the tenant keeps at once (default and most: MAX_SNAPSHOTS_PER_TENANT). */
  snapshots: z.number().int().min(0).max(1000).optional(),
  /**
   * The widest CIDR this key's sandboxes may allow, as a prefix length: 0 lets them allow any
   * address (0.0.0.0/0). Default for user keys 16; admin keys are not limited.
   */
  cidrMinPrefix: z.number().int().min(0).max(32).optional(),
  /**
   * The CPU class this key's sandboxes get (see CpuClass): `batch` makes every sandbox the key
   * creates batch, and a create that asks for `latency` answers permission_denied. Default: the
   * request's (latency unless it asks for batch).
   */
  cpuClass: CpuClass.optional(),
});
/**
 * `admin`: everything, every tenant. `builder`: its tenant's sandboxes, and makes images (commit,
 * import, pull, layer upload). `runner`: its tenant's sandboxes and FnCalls; makes no images.
 * `user`: as builder (the role keys had before roles were split).
 */
export const KeyRole = z.enum(['admin', 'builder', 'runner', 'user']);
export type KeyRole = z.infer<typeof KeyRole>;
export const CreateKeyRequest = z.strictObject({
  tenant: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/),
  role: KeyRole.optional(),
  quota: Quota.optional(),
});
export type CreateKeyRequest = z.infer<typeof CreateKeyRequest>;
export const CreateKeyResponse = z.object({ key: z.string(), keyId: z.string(), tenant: z.string(), role: KeyRole });

/** One mutating call, as the audit log keeps it. */
export const AuditEntry = z.object({
  at: z.string(),
  /** `admin` for the bootstrap key, `k_` + 16 hex of its hash for the others; null when no key was valid. */
  keyId: z.string().nullable(),
  tenant: z.string().nullable(),
  method: z.string(),
  path: z.string(),
  sandbox: z.string().nullable(),
  status: z.number(),
  /** The error code when the call failed. */
  code: z.string().nullable(),
});
export const AuditQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(10_000).optional(),
  tenant: z.string().max(64).optional(),
  sandbox: z.string().max(64).optional(),
});
export const ListAuditResponse = z.object({ entries: z.array(AuditEntry) });
export type AuditEntry = z.infer<typeof AuditEntry>;

/**
 * `joining`: the control plane is making the store and the node agree on its sandboxes; `ready`
 * takes creates; `draining` runs what it has and takes no creates; `down` stopped sending
 * heartbeats (its sandboxes are failed with the reason).
 */
export const NodeState = z.enum(['joining', 'ready', 'draining', 'down']);
export const Node = z.object({
  id: z.string(),
  address: z.string(),
  state: NodeState,
  /** The backends it runs. */
  backends: z.array(z.string()),
  /**
   * cpu: the bound on running sandboxes' CPU limits together; busyCpu: the cores they may use
   * together (over ~10 s) before creates are refused (null: no such check).
   */
  capacity: z.object({ cpu: z.number(), busyCpu: z.number().nullable(), memoryMiB: z.number(), sandboxes: z.number() }),
  allocated: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  /** What admission counts: running sandboxes' requests, paused ones' resident memory. */
  committed: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  /** What the sandboxes use now: CPUs (over ~10 s), memory resident and in swap. */
  used: z.object({ cpu: z.number(), memoryMiB: z.number(), swapMiB: z.number() }),
  sandboxes: z.number(),
  paused: z.number(),
  /** Sandboxes and paused ones per backend it runs. */
  byBackend: z.record(z.string(), z.object({ sandboxes: z.number(), paused: z.number() })),
  /**
   * Its FnCall workers (warm ones, busy ones, calls waiting for one: per image, and in all) and
   * its calls since it started: how many, cold starts (a worker started for a call that waited),
   * and the time calls waited for a worker together (ms).
   */
  fn: z.object({
    workers: z.number(),
    busy: z.number(),
    queued: z.number(),
    calls: z.number(),
    coldStarts: z.number(),
    queuedMs: z.number(),
    images: z.array(z.object({ image: z.string(), workers: z.number(), busy: z.number(), queued: z.number() })),
  }),
  /** Its members of warm pools, per pool: ready to be claimed, being made, the last error making one. */
  pools: z.array(z.object({ id: z.string(), ready: z.number(), creating: z.number(), lastError: z.string().nullable() })),
  lastHeartbeatAt: z.string(),
  /**
   * How far the node's clock is ahead of this replica's (ms, negative: behind; null: not measured
   * yet), measured on every call to it: lifetimes and activity times are moved by it on the way,
   * so they run on the control plane's clock whatever the node's says.
   */
  clockOffsetMs: z.number().nullable(),
  /** The SHA-256 fingerprint of the certificate its edge protocol's TLS is pinned to (null: plain TCP). */
  tlsFingerprint: z.string().nullable(),
});
export const ListNodesResponse = z.object({ nodes: z.array(Node) });

/** A node's load as its edge reports it in each heartbeat (the edge's EdgeLoad). */
export const NodeLoad = z.object({
  /** When the edge read it, on its own monotonic clock (ms): of two loads of one boot, the later is the truer. */
  at: z.number(),
  committed: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  requested: z.object({ cpu: z.number(), memoryMiB: z.number() }),
  used: z.object({ cpu: z.number(), memoryMiB: z.number(), swapMiB: z.number() }).nullable(),
  sandboxes: z.number().int().min(0),
  paused: z.number().int().min(0),
  byBackend: z.record(z.string(), z.object({ sandboxes: z.number().int().min(0), paused: z.number().int().min(0) })).optional(),
  /** Its FnCall workers per group (image and size) and its calls since it started. */
  fn: z
    .object({
      groups: z
        .array(
          z.object({
            key: z.string().max(64),
            image: z.string().max(512),
            workers: z.number().int().min(0),
            busy: z.number().int().min(0),
            queued: z.number().int().min(0),
          }),
        )
        .max(1024),
      calls: z.number().int().min(0),
      timedOut: z.number().int().min(0),
      failed: z.number().int().min(0),
      rejected: z.number().int().min(0),
      coldStarts: z.number().int().min(0),
      queuedMs: z.number().min(0),
      /** What the workers made for each tenant's calls hold there (every replica counts them in the tenant's quota). */
      tenants: z
        .array(z.object({ tenant: z.string().max(64), sandboxes: z.number().int().min(0), cpu: z.number().min(0), memoryMiB: z.number().min(0) }))
        .max(4096)
        .default([]),
    })
    .optional(),
  /** Its members of warm pools, per pool: ready, being made, the last error making one. */
  pools: z
    .array(z.object({ id: z.string().max(64), ready: z.number().int().min(0), creating: z.number().int().min(0), lastError: z.string().max(4096).nullable() }))
    .max(4096)
    .optional(),
});
/** A node's name: what `warren edge --name` gives (a DNS label's characters). */
export const NodeName = z
  .string()
  .regex(/^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$/, 'a node name is 1-63 of a-z, 0-9, "." and "-", starting and ending with a letter or digit');
/**
 * An edge joins the cluster (with the join token): where the control plane reaches its edge
 * protocol, the token it must present there, and the boot id of this start of the edge.
 */
export const JoinNodeRequest = z.strictObject({
  name: NodeName,
  address: z.string().regex(/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'host:port'),
  token: z.string().min(16).max(256),
  boot: z.string().min(1).max(64),
  /**
   * The edge protocol is TLS with a certificate of this SHA-256 fingerprint (`AB:CD:…`, 32
   * bytes): the control plane pins it, and talks to the edge over nothing else (absent: plain TCP).
   */
  tlsFingerprint: z
    .string()
    .regex(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/, 'a SHA-256 fingerprint: 32 bytes in upper-case hex, colon-separated')
    .optional(),
  /** FnCall workers this node keeps warm (`warren edge --fn-pool`): images by name, as the control plane knows them. */
  fnPools: z
    .array(
      z.strictObject({ image: z.string().min(1).max(512), language: z.enum(['python', 'bash', 'node']).optional(), size: z.number().int().min(1).max(256) }),
    )
    .max(64)
    .optional(),
});
export type JoinNodeRequest = z.infer<typeof JoinNodeRequest>;
export const JoinNodeResponse = z.object({
  node: z.string(),
  heartbeatMs: z.number(),
  downAfterMs: z.number(),
  /**
   * Where the node reads layers it lacks (null: none is set): a URL, absolute, or relative to
   * the one it joined through (the control plane's own blobs).
   */
  blobStore: z.object({ url: z.string(), key: z.string().optional() }).nullable(),
  /**
   * The cluster's own hosts as the control plane knows them at this join (its replicas, the
   * other nodes, the database), by address: the node keeps its sandboxes from them whatever
   * their rules.
   */
  clusterHosts: z.array(z.string()),
  /** What the join found: records kept, taken back, failed; sandboxes no record named, removed. */
  reconciled: z.object({ kept: z.number(), adopted: z.number(), failed: z.number(), removed: z.number() }),
});
export type JoinNodeResponse = z.infer<typeof JoinNodeResponse>;
export const HeartbeatRequest = z.strictObject({ boot: z.string().min(1).max(64), load: NodeLoad });
export type ListNodesResponse = z.infer<typeof ListNodesResponse>;

export const Info = z.object({
  version: z.string(),
  backends: z.array(z.object({ name: z.string(), available: z.boolean(), accelerator: z.string().nullable() })),
  e2b: z.object({ apiUrl: z.string().nullable(), sandboxUrl: z.string().nullable() }),
  /** The endpoints the operator named (`--endpoint NAME=URL`) that a sandbox's network rules may ask for, by name (never their URLs). */
  endpoints: z.array(z.string()).describe('endpoint names a create may ask for in network.endpoints (some node offers each)'),
});
export type Info = z.infer<typeof Info>;

/**
 * One point of a replica's recent history (GET /v1/metrics/history): rates over the interval
 * before `at` (per second), levels at `at`, summed over the cluster's nodes as this replica sees
 * them; creates and commands are this replica's own.
 */
export const HistoryPoint = z.object({
  at: z.string(),
  createsPerSecond: z.number(),
  commandsPerSecond: z.number(),
  /** Commands that could not be started (an API error), per second. */
  commandErrorsPerSecond: z.number(),
  fnCallsPerSecond: z.number(),
  running: z.number(),
  paused: z.number(),
  /** Cores the sandboxes used (over ~10 s), and memory resident (MiB). */
  cpuUsed: z.number(),
  memoryUsedMiB: z.number(),
});
export type HistoryPoint = z.infer<typeof HistoryPoint>;
export const MetricsHistoryResponse = z.object({ intervalSeconds: z.number(), points: z.array(HistoryPoint) });
export type MetricsHistoryResponse = z.infer<typeof MetricsHistoryResponse>;
