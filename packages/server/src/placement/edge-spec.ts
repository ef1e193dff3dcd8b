import { memoryRequestOf, sandboxEnv } from '@warren/api';
import type { EdgeLease, EdgeSandboxSpec } from '@warren/edge';
import type { SandboxRecord } from '../store/store.js';

/** A file given at create, decoded. */
export interface DecodedFile {
  path: string;
  content: Buffer;
  mode?: number;
}

/** What the edge is told of a sandbox: its record, as the edge's spec (with its lease, when it has one). */
export function edgeSpec(rec: SandboxRecord, lease: EdgeLease | null = null): EdgeSandboxSpec {
  return {
    id: rec.id,
    layers: rec.layers,
    resources: {
      cpu: rec.resources.cpu,
      memoryMiB: rec.resources.memoryMiB,
      memoryRequestMiB: memoryRequestOf(rec.resources),
      pids: rec.resources.pids,
      diskMiB: rec.resources.diskMiB,
      ...(rec.resources.cpuClass === 'batch' ? { cpuClass: 'batch' as const } : {}),
    },
    env: sandboxEnv(rec.imageEnv, rec.env),
    user: rec.user,
    workdir: rec.workdir,
    expiresAtMs: rec.expiresAt,
    idleTimeoutMs: rec.idleTimeoutSeconds === null ? null : rec.idleTimeoutSeconds * 1000,
    lastActivityMs: rec.lastActivityAt,
    paused: rec.state === 'paused',
    network: rec.network,
    pauseAfterIdleMs: rec.pauseAfterIdleSeconds == null ? null : rec.pauseAfterIdleSeconds * 1000,
    ttlCountsPaused: rec.ttlCountsPaused ?? false,
    tenant: rec.tenant,
    backend: rec.backend,
    ...(lease ? { lease } : {}),
  };
}
