import type { AgentConnect } from '../init/call.js';
import type { LayerInfo } from '@warren/images';
import type { CpuClass, InputEvent, Resources } from '@warren/api';

/** Everything a backend needs to start one sandbox. */
export interface BackendCreateSpec {
  id: string;
  /** Layer digests, bottom first. */
  layers: string[];
  /** cpuClass absent: latency. */
  resources: Required<Pick<Resources, 'cpu' | 'memoryMiB' | 'pids'>> & { memoryRequestMiB?: number; diskMiB?: number | null; cpuClass?: CpuClass };
  signal?: AbortSignal;
  /**
   * The network namespace to join (a path), or one still being made (the backend waits for it
   * only where it needs it, after its own set-up); without one, the sandbox gets an empty one.
   */
  netns?: string | Promise<string | undefined>;
  /**
   * The caller's next call to the init (its set-up) proves the init serves: no hello first. A
   * create that makes no other call (a pool's member, a FnCall worker) leaves it unset.
   */
  skipHello?: boolean;
  /** Its link on the node's sandbox network, for a backend whose VMM opens a tap (Backend.link). */
  tap?: TapLink;
  /** A FnCall worker (see ContainerSpec.fn): it serves only per-call isolated runs. */
  fn?: boolean;
}

/**
 * A sandbox's link as a VMM makes it: the tap the VMM opens is the host's end, named `ifname`
 * (see SandboxNetwork.bindTap); the guest takes `address`/`prefix` and routes through `gateway`.
 */
export interface TapLink {
  ifname: string;
  address: string;
  prefix: number;
  gateway: string;
}

/**
 * A sandbox's host name: its id with `-` for `_` (`sb-…`), a valid DNS label, so each sandbox
 * has a name of its own, as a Docker container does (a container's from its runtime, a microVM's from the agent's HELLO).
 */
export function sandboxHostname(id: string): string {
  return id.replace(/[^A-Za-z0-9-]/g, '-').slice(0, 63);
}

/**
 * A sandbox's /etc/resolv.conf: the node answers every DNS query a sandbox sends, at its link's
 * far end (`gateway`). A file of the sandbox's own (not a mount: /etc stays movable); never committed.
 */
export function sandboxResolvConf(gateway: string): Buffer {
  return Buffer.from(`nameserver ${gateway}\noptions timeout:2 attempts:2\n`);
}

export interface SandboxStats {
  cpuSeconds: number;
  memoryBytes: number;
  /** Of its memory, what sits in swap. */
  swapBytes: number;
}

/** How often a sandbox's own limits were hit so far (cgroup counters; null: not known). */
export interface LimitCounts {
  /** Processes the kernel's OOM killer ended at its memory limit. */
  oomKills: number | null;
  /** Forks its pids limit refused. */
  pidsMaxHits: number | null;
}

/** What a running sandbox exposes to the edge: a way to its agent (the init). */
export interface BackendSandbox {
  id: string;
  /** A new connection to the sandbox's agent, one per call (the init serves many at once). */
  connect: AgentConnect;
  /** Host pid of the sandbox's init, to notice when it dies (null if unknown). */
  initPid: number | null;
  /** Its start time (clock ticks after boot): with the pid, it names the process even after the pid is reused. */
  initStartTime: number | null;
}

/** What a backend can do beyond making and removing sandboxes; the edge refuses the rest. */
export interface BackendCapabilities {
  /** Freeze a sandbox and give back its memory (pause and resume). */
  pause: boolean;
  /** Its changes as a layer (commit). */
  commit: boolean;
  /** The node reaches its ports (an address of its own on the sandbox's network). */
  ports: boolean;
  /** It can run FnCall workers. */
  fnWorkers: boolean;
  /** Its sandboxes can join the node's sandbox network (else they have loopback only). */
  network: boolean;
  /** Its sandboxes have a display: a screen to read and a keyboard and pointer to drive (a full VM's); absent: none. */
  display?: boolean;
  /** It freezes a sandbox as a fork base its forks start from (Backend.freeze); absent: no forks. */
  fork?: boolean;
}

/**
 * A layer entry `fork:<baseId>` names a fork base of this node (Backend.freeze): the state of a
 * sandbox at the moment it was forked, kept on the node for as long as a sandbox stands on it.
 * A fork's layers are its source's with the base's entry on top.
 */
export const FORK_LAYER_PREFIX = 'fork:';

/** A fork base's id: `fb_` and 24 lowercase letters or digits (what the control plane makes). */
export const FORK_BASE_ID = /^fb_[a-z0-9]{24}$/;

/** The base a layer entry names, or null for an image layer (a digest). */
export function forkBaseOf(layer: string): string | null {
  if (!layer.startsWith(FORK_LAYER_PREFIX)) return null;
  const id = layer.slice(FORK_LAYER_PREFIX.length);
  return FORK_BASE_ID.test(id) ? id : null;
}

/** The layer entry of a fork base. */
export function forkLayer(baseId: string): string {
  return FORK_LAYER_PREFIX + baseId;
}

/**
 * One kind of sandbox (container, microVM, VM). The edge, not the backend, owns lifecycle,
 * admission and accounting; a backend only makes, finds, freezes and removes sandboxes.
 */
export interface Backend {
  /** What a create names in `backend` to get this one. */
  readonly name: string;
  readonly capabilities: BackendCapabilities;
  /** How its sandboxes are run when that differs by machine (a VM's `kvm` or `tcg`). */
  readonly accelerator?: string;
  /**
   * How its sandboxes join the node's sandbox network (with `capabilities.network`): their
   * runtime joins a namespace (`netns`, the default), or their VMM opens a tap (`tap`).
   */
  readonly link?: 'netns' | 'tap';
  /**
   * Starts a sandbox. Its CPU limit may wait for `started`: what the platform does in it before
   * handing it over (its init's start, resolv.conf, workdir, files) is not the sandbox's to pay for.
   */
  create(spec: BackendCreateSpec): Promise<BackendSandbox>;
  /** The platform's set-up in a new sandbox is done: its CPU limit applies from now on. */
  started(id: string): Promise<void>;
  /** Finds a sandbox that was running before this process started; null if it is gone. */
  adopt(id: string): Promise<BackendSandbox | null>;
  destroy(id: string): Promise<void>;
  pause(id: string): Promise<void>;
  /**
   * Gives back what memory a paused sandbox can spare; resolves the bytes still resident.
   * `signal` stops it early (the sandbox is resuming): it then resolves as soon as it stopped.
   */
  reclaim(id: string, signal?: AbortSignal): Promise<number>;
  /**
   * Pages a running sandbox's private memory out (to swap) without stopping it: what memory
   * pressure does to an idle one before pausing anything; it faults back in when used. Resolves
   * the bytes still resident. Absent: the backend cannot (a VM's guest holds its own memory).
   */
  pageOut?(id: string, signal?: AbortSignal): Promise<number>;
  resume(id: string): Promise<void>;
  stats(id: string): Promise<SandboxStats>;
  /** The same for all of this backend's sandboxes together. */
  totals(): Promise<SandboxStats>;
  /**
   * Memory its running sandboxes hold beyond what they requested, as of the last `totals`
   * (MiB): what a VMM really holds (its guest's pages, its own) past the sandbox's request.
   * Admission counts it; absent: none.
   */
  heldBeyondRequestsMiB?(): number;
  /** Whether a sandbox's processes are gone (its init exited or was killed). */
  exited(sb: BackendSandbox): Promise<boolean>;
  /**
   * Calls `onExit` once when a sandbox's init ends (at once if it has); resolves whether it will
   * (false: it cannot watch this one, and the edge asks `exited` now and then instead). Absent:
   * the edge asks `exited`.
   */
  watchExit?(sb: BackendSandbox, onExit: () => void): Promise<boolean>;
  /**
   * How many of a sandbox's processes the kernel killed at its own memory limit so far (null or
   * absent: not known here, e.g. inside a VM's guest): what tells an OOM from an exit.
   */
  oomKills?(id: string): Promise<number | null>;
  /**
   * The sandbox's counters of its own limits being hit so far (absent: not known here): what tells
   * a command that ran into one (see LimitHit).
   */
  limitCounts?(id: string): Promise<LimitCounts>;
  /** Whether a sandbox's writable layer is full (under DISK_FULL_MARGIN_BYTES left of its diskMiB; null or absent: it has no limit, or not known). */
  diskFull?(id: string): Promise<boolean | null>;
  /**
   * A paused sandbox's changes (its writable layer, without `exclude`'s paths and the paths that
   * match `excludeRegex`) as a new layer in the node's layer store, pinned there until the caller
   * names it or lets it go.
   */
  commit(id: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo>;
  /**
   * With `capabilities.fork`: what sandbox `id` holds now becomes the fork base `baseId` of this
   * node (its files; a VM's memory and devices too), which a create whose `layers` end with
   * `fork:<baseId>` starts from. The edge freezes the sandbox around the call (a paused one stays
   * paused). The base goes when releaseLayers or forgetLayers name its entry (no sandbox stands
   * on it any more).
   */
  freeze?(id: string, baseId: string): Promise<void>;
  /**
   * With `capabilities.fork`: a fork base's files as an image layer in the node's layer store
   * (pinned as commit's), for what must outlive the node's copy or leave the node (a commit or a
   * snapshot of a fork).
   */
  baseLayer?(baseId: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo>;
  /** The fork bases this backend has on the node (to find leftovers). */
  bases?(): Promise<string[]>;
  /** Told when no sandbox uses these layers any more (it may unmount them; a fork base's entry: remove it). */
  releaseLayers(digests: string[]): Promise<void>;
  /** Lets go of removed layers (unmounts them). */
  forgetLayers(digests: string[]): Promise<void>;
  /** With `capabilities.display`: the sandbox's screen now, as a PNG. */
  screen?(id: string): Promise<Buffer>;
  /** With `capabilities.display`: keys, text and pointer events to its display, in order. */
  input?(id: string, events: InputEvent[]): Promise<void>;
  /** Ids of sandboxes this backend has on the node (to find leftovers). */
  list(): Promise<string[]>;
  close(opts: { keepLayers: boolean }): Promise<void>;
}
