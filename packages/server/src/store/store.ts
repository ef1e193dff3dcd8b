import type { AuditEntry, KeyRole, NetworkPolicy, SandboxState } from '@warren/api';

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
  resources: { cpu: number; memoryMiB: number; pids: number; diskMiB: number | null };
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
}

export interface KeyRecord {
  hash: string;
  tenant: string;
  role: KeyRole;
  quota: { sandboxes?: number; cpu?: number; memoryMiB?: number; cidrMinPrefix?: number };
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
  resources: { cpu: number; memoryMiB: number; pids: number; diskMiB: number | null };
  network: { egress: 'deny' | 'allow'; allow: string[]; deny: string[] };
  size: number;
  createdAt: number;
  /** The quota of the key that made it: its refills stay within it (absent in older records: none). */
  quota?: KeyRecord['quota'];
}

export interface ListFilter {
  tenant: string;
  labels?: Array<[string, string]>;
  state?: SandboxState;
  limit: number;
  /** Id to continue after (ids sort by creation). */
  after?: string;
}

/** The control plane's state: SQLite embedded, PostgreSQL in a cluster. */
export interface Store {
  insertSandbox(r: SandboxRecord): void;
  updateSandbox(id: string, patch: Partial<Pick<SandboxRecord, 'state' | 'expiresAt' | 'lastActivityAt' | 'error' | 'network'>>): void;
  getSandbox(id: string): SandboxRecord | undefined;
  findByRequestId(tenant: string, requestId: string): SandboxRecord | undefined;
  listSandboxes(f: ListFilter): SandboxRecord[];
  /** Sandboxes in a live state on a node (running, paused, creating). */
  liveOnNode(node: string): SandboxRecord[];
  tenantUsage(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number };
  deleteSandbox(id: string): void;
  /** The command that first carried an exec requestId in a sandbox, if any. */
  execRequest(sandboxId: string, requestId: string): string | undefined;
  /** Remembers which command a requestId starts (first writer wins); whether this call was the first. */
  putExecRequest(sandboxId: string, requestId: string, commandId: string): boolean;
  /** Forgets one requestId (its command could not be started). */
  deleteExecRequest(sandboxId: string, requestId: string): void;
  /** Forgets a sandbox's exec requestIds (when it stops). */
  deleteExecRequests(sandboxId: string): void;
  putPool(p: PoolRecord): void;
  listPools(): PoolRecord[];
  deletePool(id: string): void;
  putKey(k: KeyRecord): void;
  /** Appends audit entries (one transaction). */
  appendAudit(entries: AuditEntry[]): void;
  /** The newest first. */
  listAudit(q: { limit: number; tenant?: string; sandbox?: string }): AuditEntry[];
  getKey(hash: string): KeyRecord | undefined;
  /** Removes the key whose hash begins with `hashPrefix` (16 hex digits, what a keyId names); whether one was. */
  deleteKeyByPrefix(hashPrefix: string): boolean;
  close(): void;
}
