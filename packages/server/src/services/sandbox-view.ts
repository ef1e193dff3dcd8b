import type { CreateSandboxRequest, Image, NetworkPolicy, Sandbox, SandboxState } from '@warren/api';
import { END_BY, WarrenError, memoryRequestOf } from '@warren/api';
import type { EdgeSandboxState } from '@warren/edge';
import type { ImageCatalogue } from '@warren/images';
import type { KeyRecord, SandboxRecord } from '../store/store.js';
import type { DecodedFile } from '../placement/edge-spec.js';
import type { Caller } from './sandboxes.js';

// Pure pieces of the sandbox service: what a record becomes on the edge and on the wire, what
// makes pool sandboxes interchangeable, files decoded once.

/** An image the caller may use: every tenant's, its tenant's, or any for an admin; not_found otherwise. */
export async function visibleImage(catalogue: ImageCatalogue, caller: Caller, name: string): Promise<Image> {
  const img = await catalogue.getImage(name);
  if (!img || (img.tenant !== null && img.tenant !== caller.tenant && caller.role !== 'admin'))
    throw new WarrenError('not_found', `image "${name}" does not exist`, { image: name });
  return img;
}

/** A record's resources as the API shows them (a record from before CPU classes: latency). */
export const viewResources = (r: SandboxRecord['resources']): Sandbox['resources'] => ({
  cpu: r.cpu,
  memoryMiB: r.memoryMiB,
  pids: r.pids,
  diskMiB: r.diskMiB,
  memoryRequestMiB: memoryRequestOf(r),
  cpuClass: r.cpuClass ?? 'latency',
});

/** What makes a pool's sandbox interchangeable with a new one: tenant, layers, resources, network. */
export function poolKey(tenant: string, layers: string[], resources: SandboxRecord['resources'], network: NetworkPolicy): string {
  const n = { egress: network.egress ?? 'deny', allow: [...(network.allow ?? [])].sort(), deny: [...(network.deny ?? [])].sort() };
  return JSON.stringify([
    tenant,
    layers,
    resources.cpu,
    resources.memoryMiB,
    memoryRequestOf(resources),
    resources.pids,
    resources.diskMiB,
    resources.cpuClass ?? 'latency',
    n,
  ]);
}

/** The files of a create request, decoded from base64 (once per request: a batch shares them). */
export function decodeFiles(req: Pick<CreateSandboxRequest, 'files'>): DecodedFile[] {
  return (req.files ?? []).map((f) => ({ path: f.path, content: Buffer.from(f.content, 'base64'), mode: f.mode }));
}

const EMPTY_NET_USAGE = { bytesIn: 0, bytesOut: 0, connectionsAllowed: 0, connectionsDenied: 0, allowed: {}, denied: {} };

/** Whether a key's quota limits anything (a key without one is never counted). */
export const hasQuota = (q: KeyRecord['quota']): boolean => q.sandboxes !== undefined || q.cpu !== undefined || q.memoryMiB !== undefined;

/** The states a running sandbox's pause and resume move between. */
export const RUNNING: SandboxState[] = ['running', 'paused'];
const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/**
 * The state the API shows: a running or paused sandbox's from its edge (a pause there is
 * seen before the store hears of it); any other from its record. A sandbox its node has made
 * whose create has not finished stays `creating`: the create may still fail or be cut off, and
 * then it is removed.
 */
export function shownState(rec: SandboxRecord, live: EdgeSandboxState | null): SandboxState {
  if (!live || !RUNNING.includes(rec.state)) return rec.state;
  return live.paused ? 'paused' : 'running';
}

/** A sandbox record and the edge's live state of it (null: not live) as the API shows it. */
export function sandboxView(rec: SandboxRecord, live: EdgeSandboxState | null): Sandbox {
  const state = shownState(rec, live);
  const none = { cpuSeconds: 0, cpuRecent: 0, memoryBytes: 0, swapBytes: 0, idleSeconds: 0 };
  const st = live?.usage ?? null;
  const usage = st
    ? { cpuSeconds: st.cpuSeconds, cpuRecent: st.cpuRecent, memoryBytes: st.memoryBytes, swapBytes: st.swapBytes, idleSeconds: Math.round(st.idleSeconds) }
    : none;
  // The create answer skips usage reads, as for CPU and memory: nothing has happened yet.
  const net = live?.network ?? null;
  const policy = net?.policy ?? { egress: rec.network?.egress ?? 'deny', allow: rec.network?.allow ?? [], deny: rec.network?.deny ?? [] };
  const network = {
    egress: policy.egress,
    allow: policy.allow,
    deny: policy.deny,
    endpoints: net?.policy.endpoints ?? rec.network?.endpoints ?? [],
    address: net?.address ?? null,
    usage: net?.usage ?? EMPTY_NET_USAGE,
  };
  const s: Sandbox = {
    id: rec.id,
    state,
    backend: rec.backend,
    image: rec.image,
    layers: rec.layerNames,
    node: rec.node,
    labels: rec.labels,
    resources: viewResources(rec.resources),
    user: rec.user,
    workdir: rec.workdir,
    createdAt: new Date(rec.createdAt).toISOString(),
    // The edge's, while it runs: a resume moves it before the store has heard.
    expiresAt: iso(live ? live.expiresAtMs : rec.expiresAt),
    lastActivityAt: new Date(live?.lastActivityMs ?? rec.lastActivityAt).toISOString(),
    idleTimeoutSeconds: rec.idleTimeoutSeconds,
    pauseAfterIdleSeconds: rec.pauseAfterIdleSeconds ?? null,
    lease: rec.lease ?? null,
    end: rec.end ? { reason: rec.end.reason, by: END_BY[rec.end.reason], detail: rec.end.detail, at: new Date(rec.end.at).toISOString() } : null,
    usage,
    network,
  };
  if (rec.error) s.error = rec.error;
  return s;
}
