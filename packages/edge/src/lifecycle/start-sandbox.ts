import { WarrenError, memoryRequestOf } from '@warren/api';
import { sandboxResolvConf, type BackendSandbox } from '../backends/backend.js';
import { compilePolicy, opensNetwork } from '../net/policy.js';
import type { NetAttachment, SandboxNetwork } from '../net/sandbox-network.js';
import type { BackendSet } from './backend-set.js';
import type { Commitments } from './commitments.js';
import type { EdgeSandboxSpec } from './edge-spec.js';
import type { LayerRefs } from './layer-refs.js';
import { newLive, type Live } from './live.js';
import { watchEnd, type OnEnded } from './liveness.js';
import type { MemoryPressure } from './pressure.js';
import { configureSandbox, setUpCalls } from './setup.js';

/** What a create's steps use of its edge (made once by the Edge). */
export interface StartContext {
  backends: BackendSet;
  /** Throws resource_exhausted when the node has no room for these resources. */
  admit(r: EdgeSandboxSpec['resources']): void;
  commitments: Commitments;
  /** The node's sandbox network, if it has one. */
  network: SandboxNetwork | undefined;
  layerRefs: LayerRefs;
  pressure: MemoryPressure;
  maxFileBytes: number;
  /** The edge's live sandboxes: the new one joins them once it is set up. */
  live: Map<string, Live>;
  now(): number;
  ended: OnEnded;
  /** Learns the sandbox's lease (Edge.holdLease). */
  holdLease(spec: EdgeSandboxSpec): void;
}

/**
 * A create's steps on its node: admitted, its memory made available, its network and backend
 * started side by side, the set-up call (resolv.conf, user, workdir, files), then live and
 * watched. On any failure everything it took is given back and nothing of it is left.
 */
export async function startSandbox(c: StartContext, spec: EdgeSandboxSpec, files: Array<{ path: string; content: Buffer; mode?: number }>): Promise<void> {
  const backend = c.backends.pick(spec);
  c.admit(spec.resources);
  c.commitments.reserve(spec.resources);
  let sb: BackendSandbox | null = null;
  let room: { release(): void } | null = null;
  let attaching: Promise<NetAttachment> | null = null;
  // A backend without the node's sandbox network gives its sandboxes loopback only: rules
  // that open more are refused, never recorded and ignored.
  if (!backend.capabilities.network && opensNetwork(compilePolicy(spec.network)))
    throw new WarrenError('invalid_argument', `a ${backend.name} sandbox has loopback only: leave out network rules that open it`, { backend: backend.name });
  const net = backend.capabilities.network ? c.network : undefined;
  // Its layers are held from now on: a fork base it stands on is not removed under its start.
  c.layerRefs.hold(spec.layers);
  try {
    room = await c.pressure.hold(memoryRequestOf(spec.resources));
    // A runtime joins a namespace of the node's; a VMM opens a tap for the sandbox's slot (its
    // guest writes its resolv.conf itself: the HELLO carries it).
    const tap = net && !spec.fn && backend.link === 'tap' ? await net.attachTap(spec.id, spec.network) : undefined;
    // Its namespace is made while the backend sets up the sandbox's disk and root (it waits for
    // the namespace only to start the sandbox in it); the create fails with it.
    attaching = net && !spec.fn && !tap ? net.attach(spec.id, spec.network) : null;
    const nsPath = attaching?.then((a) => a.nsPath);
    nsPath?.catch(() => undefined);
    // The set-up call right after proves the init serves: no hello before it.
    const skipHello = setUpCalls(spec, files, attaching !== null);
    sb = await backend.create({ id: spec.id, layers: spec.layers, resources: spec.resources, netns: nsPath, tap, fn: spec.fn, skipHello });
    const ns = attaching ? await attaching : null;
    // One request to the init (resolv.conf: the node's resolver; user, workdir, files), and
    // beside it the namespace's handover (the init holds it now: the helper lets its own go).
    const [setUp, handover] = await Promise.allSettled([
      configureSandbox(sb.connect, spec, files, c.maxFileBytes, ns ? sandboxResolvConf(ns.gateway) : undefined),
      net && ns ? net.started(spec.id) : undefined,
    ]);
    for (const r of [setUp, handover]) if (r.status === 'rejected') throw r.reason;
    const l = newLive(spec, sb, backend, c.now());
    c.live.set(spec.id, l);
    c.commitments.update(spec.id, l);
    // Its CPU quota (held back through the set-up) and the watch on its init, together.
    await Promise.all([backend.started(spec.id), watchEnd(c.live, spec.id, l, c.ended)]);
    // The namespace it took is made again now, not while this create waited on the helper.
    if (attaching) net?.topUp();
    c.holdLease(spec);
  } catch (e) {
    c.live.delete(spec.id);
    c.commitments.update(spec.id, undefined);
    if (sb) await backend.destroy(spec.id).catch(() => undefined);
    const idle = c.layerRefs.release(spec.layers);
    if (idle.length) await backend.releaseLayers(idle).catch(() => undefined);
    // A namespace still being made when the backend failed is let go once it is there.
    await attaching?.catch(() => undefined);
    await net?.detach(spec.id).catch(() => undefined);
    c.commitments.release(spec.resources);
    throw e;
  } finally {
    c.commitments.made();
    room?.release();
  }
}
