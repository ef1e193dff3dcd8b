import type { CpuClass, CreateSandboxRequest, NetworkPolicy } from '@warren/api';
import { DEFAULTS, WarrenError, memoryRequestOf } from '@warren/api';
import { compilePolicy, opensNetwork, widestAllowPrefix } from '@warren/edge';
import type { ImageCatalogue } from '@warren/images';
import type { Cluster } from '../cluster/cluster.js';
import type { SandboxRecord } from '../store/store.js';
import { visibleImage } from './sandbox-view.js';
import type { Caller, SandboxServiceOptions } from './sandboxes.js';

/** A create's request with the image it starts from named (a snapshot's, see namedCreate). */
export type Named = CreateSandboxRequest & { image: string };

/** What resolving a create's request reads. */
export interface ResolveParts {
  catalogue: ImageCatalogue;
  cluster: Pick<Cluster, 'networking' | 'endpoints'>;
  defaults: SandboxServiceOptions['defaults'];
}

/** A create's image layers and env, resources and network rules, resolved. */
export interface ResolvedCreate {
  layers: string[];
  resources: SandboxRecord['resources'];
  network: NetworkPolicy;
  imageEnv: Record<string, string>;
}

/**
 * The request with the image it starts from: its `image`, or its `snapshot`'s, whose source's
 * backend, user and workdir it takes where it names none.
 */
export async function namedCreate(catalogue: ImageCatalogue, caller: Caller, req: CreateSandboxRequest): Promise<Named> {
  if (req.image !== undefined) return req as Named;
  const name = req.snapshot ?? '';
  const img = await visibleImage(catalogue, caller, name).catch(() => null);
  if (!img?.snapshot) throw new WarrenError('not_found', `snapshot "${name}" does not exist`, { snapshot: name });
  const s = img.snapshot;
  return {
    ...req,
    snapshot: undefined,
    image: img.name,
    backend: req.backend ?? s.backend,
    user: req.user ?? s.user ?? undefined,
    workdir: req.workdir ?? s.workdir ?? undefined,
  };
}

/**
 * What a create (or a pool) asks for, resolved: the image's layers and the extra ones (last on
 * top), resources with the node's defaults, the network rules checked and normalised.
 */
export async function resolveCreate(p: ResolveParts, caller: Caller, req: Pick<Named, 'image' | 'layers' | 'resources' | 'network'>): Promise<ResolvedCreate> {
  const network = checkNetwork(p, caller, req.network);
  const image = await visibleImage(p.catalogue, caller, req.image);
  const extra: string[] = [];
  for (const ref of req.layers ?? []) {
    const digest = await p.catalogue.resolveLayer(ref, caller.role === 'admin' ? undefined : caller.tenant);
    if (!digest) throw new WarrenError('not_found', `layer "${ref}" does not exist`, { layer: ref });
    extra.push(digest);
  }
  const r = req.resources ?? {};
  // Fail closed: a limit this node cannot enforce is refused, never recorded and ignored.
  if (r.diskMiB !== undefined && p.defaults.diskMiB === null)
    throw new WarrenError(
      'invalid_argument',
      'resources.diskMiB cannot be enforced on this node (no disk quotas on its sandboxes’ file system); leave it out',
      {
        diskMiB: r.diskMiB,
      },
    );
  const memoryMiB = r.memoryMiB ?? p.defaults.memoryMiB;
  const resources = {
    cpu: r.cpu ?? p.defaults.cpu,
    memoryMiB,
    memoryRequestMiB: checkedMemoryRequest(memoryMiB, r.memoryRequestMiB),
    pids: r.pids ?? p.defaults.pids,
    diskMiB: r.diskMiB ?? p.defaults.diskMiB,
    cpuClass: cpuClassFor(caller, r.cpuClass),
  };
  return { layers: [...image.layers, ...extra], resources, network, imageEnv: image.env };
}

/**
 * A sandbox's CPU class: the request's (default latency), or batch for a key an operator marked
 * so (its quota's cpuClass), which may not ask for latency.
 */
export function cpuClassFor(caller: Pick<Caller, 'quota'>, asked: CpuClass | undefined): CpuClass {
  const marked = caller.quota.cpuClass;
  if (marked === 'batch' && asked === 'latency')
    throw new WarrenError('permission_denied', 'this key’s sandboxes are batch (its quota’s cpuClass); leave out resources.cpuClass or ask for batch', {
      cpuClass: asked,
      keyCpuClass: marked,
    });
  return asked ?? marked ?? DEFAULTS.sandbox.resources.cpuClass;
}

/**
 * Rules a sandbox may have: they parse (the schema checked each entry), the node can honour
 * them, and the caller may open the CIDRs they name.
 */
export function checkNetwork(p: ResolveParts, caller: Caller, policy: NetworkPolicy | undefined): NetworkPolicy {
  const rules = policy ?? { egress: 'deny' };
  const compiled = compilePolicy(rules);
  if (opensNetwork(compiled) && !p.cluster.networking())
    throw new WarrenError('invalid_argument', 'sandboxes on this node have loopback only (it runs without sandbox networking)', { network: rules });
  // Read only for a create that names endpoints: the set is made anew from every node's.
  const offered = compiled.source.endpoints.length ? p.cluster.endpoints() : new Set<string>();
  for (const e of compiled.source.endpoints) {
    if (!offered.has(e))
      throw new WarrenError('invalid_argument', `network.endpoints: no node offers an endpoint named "${e}"`, {
        endpoint: e,
        endpoints: [...offered].sort(),
      });
  }
  const widest = widestAllowPrefix(compiled);
  const min = caller.role === 'admin' ? 0 : (caller.quota.cidrMinPrefix ?? 16);
  if (widest !== null && widest < min) {
    throw new WarrenError('permission_denied', `this key may allow CIDRs of /${min} or narrower; the rules ask for a /${widest}`, {
      network: rules,
      cidrMinPrefix: min,
    });
  }
  const { egress, allow, deny, endpoints } = compiled.source;
  return endpoints.length ? { egress, allow, deny, endpoints } : { egress, allow, deny };
}

/** A sandbox's memory request: the one asked for (never more than its limit), else the default share of the limit. */
export function checkedMemoryRequest(memoryMiB: number, asked: number | undefined): number {
  if (asked !== undefined && asked > memoryMiB)
    throw new WarrenError('invalid_argument', `resources.memoryRequestMiB (${asked}) is more than resources.memoryMiB (${memoryMiB}), the sandbox's limit`, {
      memoryMiB,
      memoryRequestMiB: asked,
    });
  return memoryRequestOf({ memoryMiB, memoryRequestMiB: asked });
}
