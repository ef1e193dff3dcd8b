import type { SandboxRecord } from '../store/store.js';

/** A running busybox sandbox's record on node `n1`, for store and service tests; `more` replaces fields. */
export function sandboxRecord(id: string, tenant: string, more: Partial<SandboxRecord> = {}): SandboxRecord {
  return {
    id,
    tenant,
    node: 'n1',
    state: 'running',
    backend: 'container',
    image: 'busybox:latest',
    layers: [],
    layerNames: [],
    labels: {},
    resources: { cpu: 0.5, memoryMiB: 128, pids: 64, diskMiB: null },
    env: {},
    user: null,
    workdir: null,
    createdAt: 1,
    expiresAt: null,
    lastActivityAt: 1,
    idleTimeoutSeconds: null,
    error: null,
    requestId: null,
    ...more,
  };
}
