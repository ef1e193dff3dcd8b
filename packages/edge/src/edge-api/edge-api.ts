import type { Duplex } from 'node:stream';
import type { ErrorCode, ExecEvent, ExecRequest, ExitEvent, FileEntry, InputEvent, NetworkPolicy, TerminalSize, CommandInfo } from '@warren/api';
import type { LayerInfo } from '@warren/images';
import type { EdgeCapacity } from '../lifecycle/admission.js';
import type { BackendCapabilities } from '../backends/backend.js';
import type { EdgeSandboxSpec, EdgeSandboxState } from '../lifecycle/edge-spec.js';
import type { EdgeEvent } from '../lifecycle/events.js';
import type { FnCallOutcome, FnCallSpec } from '../fn/fn-call.js';
import type { EdgeFnCall, EdgeFnResult, FnGroupSpec, FnLoad } from '../fn/fn-workers.js';
import type { EdgePoolLoad, EdgePoolSpec } from '../lifecycle/pool-members.js';
import type { EdgeLease } from '../lifecycle/leases.js';

export type { EdgeEvent } from '../lifecycle/events.js';

/** What a node is and promises: it does not change while the edge runs. */
export interface EdgeInfo {
  nodeId: string;
  /** Made anew each time the edge starts (its event numbers start anew with it). */
  boot: string;
  capacity: EdgeCapacity;
  /** Whether sandboxes can have a network beyond loopback. */
  networking: boolean;
  /** The operator's endpoints on this node by name (`--endpoint`; absent from an edge that has none to say). */
  endpoints?: string[];
  /** The largest file a write or an archive may put into a sandbox, in bytes. */
  maxFileBytes: number;
  /** The backends it runs, by name, and what each can do (the first is the default). */
  backends: Array<{ name: string; capabilities: BackendCapabilities; accelerator?: string | null }>;
}

/** What the node carries now (see Edge.usage, requested and used). */
export interface EdgeLoad {
  /**
   * When it was read, on the edge's own monotonic clock (ms; only compared with other loads of
   * the same boot): of two loads, the later one is the truer.
   */
  at: number;
  /** What admission counts: running sandboxes' requests, paused ones' resident memory. */
  committed: { cpu: number; memoryMiB: number };
  /** What the sandboxes requested in all, paused ones included. */
  requested: { cpu: number; memoryMiB: number };
  /** What they really use (cgroup totals); only when asked for. */
  used: { cpu: number; memoryMiB: number; swapMiB: number } | null;
  sandboxes: number;
  paused: number;
  /** Sandboxes and paused ones per backend (absent from an edge that does not say). */
  byBackend?: Record<string, { sandboxes: number; paused: number }>;
  /** Its FnCall workers and calls (absent from an edge that runs none). */
  fn?: FnLoad;
  /** Its members of warm pools, per pool (absent from an edge that keeps none). */
  pools?: EdgePoolLoad[];
}

/** A file handed over at create, whole. */
export interface EdgeFile {
  path: string;
  content: Buffer;
  mode?: number;
}

/** One sandbox of a createMany: its state, or why it was not made (the error the edge threw). */
export type CreateOutcome = { state: EdgeSandboxState } | { error: { code: ErrorCode; message: string; details: Record<string, unknown> } };

/** The most sandboxes one createMany makes. */
export const MAX_CREATE_MANY = 256;

/** A command's events as it runs, from its start (or the offset asked for) to its exit or error. */
export interface CommandStream {
  commandId: string;
  /** Its process id inside the sandbox (a session's command: the session shell's); 0 if unknown. */
  pid?: number;
  /** The command runs on when the reader stops (breaks out of the loop). */
  events: AsyncIterable<ExecEvent>;
}

/** A command run to its end, with its whole retained output. */
export interface CommandResult {
  commandId: string;
  stdout: string;
  stderr: string;
  /** Its exit, or why it could not be run to one. */
  end: ExitEvent | { type: 'error'; error: { code: string; message: string } };
}

/** A file's bytes, streamed (in and out). */
export type FileBody = AsyncIterable<Uint8Array>;

/**
 * The only way anything reaches an edge: every call async, plain data in and out (no closures,
 * no live objects, no host paths), streams for command output and file bodies, and one numbered
 * event stream from the edge. Implemented in-process (localEdgeApi) and over HTTP (EdgeApiServer,
 * RemoteEdgeApi); sandbox calls answer `conflict` for a sandbox that is not live on the node.
 */
export interface EdgeApi {
  info(): Promise<EdgeInfo>;
  /** `used`: also read what the sandboxes really use (cgroup files; a few ms). */
  load(opts?: { used?: boolean }): Promise<EdgeLoad>;
  /** Throws resource_exhausted when the node cannot take a sandbox this size now. */
  admit(resources: EdgeSandboxSpec['resources']): Promise<void>;

  // ---- sandboxes ----
  /**
   * Starts a sandbox, applies its user, workdir and files, and answers its state when it is
   * ready, with the node's load just after (`used` not read): what placement sees next.
   */
  create(spec: EdgeSandboxSpec, files?: EdgeFile[]): Promise<EdgeSandboxState & { load?: EdgeLoad }>;
  /**
   * Makes several sandboxes with the same files (a batch's sandboxes placed on this node; at
   * most MAX_CREATE_MANY): each admitted in turn as `create` admits one, then made side by side.
   * Answers each one's state or error, in order, and the node's load once all are done: one
   * call per node and batch instead of one per sandbox.
   */
  createMany(specs: EdgeSandboxSpec[], files?: EdgeFile[]): Promise<{ outcomes: CreateOutcome[]; load: EdgeLoad }>;
  /**
   * Forks sandbox `sourceId`: what it holds now becomes the fork base `baseId` (frozen meanwhile;
   * a paused one stays paused, a running one runs on), then each spec is made as createMany makes
   * them (admitted in turn, side by side). Each spec's `layers` must be the source's with
   * `fork:<baseId>` on top, and its backend the source's. A base none of the children stands on
   * is removed before the answer. With `alone`, when the node had no room for some children, the
   * answer's `alone` is the children's layers with each fork base made an image layer of the
   * node's store (pinned): what those children stand on elsewhere (made before the base may go).
   */
  fork(
    sourceId: string,
    baseId: string,
    specs: EdgeSandboxSpec[],
    o?: { alone?: boolean },
  ): Promise<{ outcomes: CreateOutcome[]; load: EdgeLoad; alone?: string[] }>;
  /**
   * A layer of the node's store, its metadata image or its data file, as bytes: how a layer made
   * here (a commit, a fork base) reaches the control plane's blob store, and from there other
   * nodes. not_found for one the node does not hold on its own disk.
   */
  readLayer(digest: string, part: 'meta' | 'data'): Promise<FileBody>;
  /** Hands a running (pool's) sandbox to a caller: its env, user, workdir and lifetime become `spec`'s. */
  claim(spec: EdgeSandboxSpec, files?: EdgeFile[]): Promise<EdgeSandboxState>;
  /** Takes back a sandbox that ran before the edge restarted; false when it is gone. */
  adopt(spec: EdgeSandboxSpec): Promise<boolean>;
  /** Stops a sandbox and removes what it left (also one the edge does not hold: leftovers). */
  destroy(id: string): Promise<void>;
  /**
   * The live ones of these sandboxes (all when `ids` is absent); `usage`: with CPU, memory and
   * network counters; `touched`: only those with activity since the last `touched` call (what a
   * control plane writes back to its store; the call clears it).
   */
  sandboxes(q?: { ids?: string[]; usage?: boolean; touched?: boolean }): Promise<EdgeSandboxState[]>;
  setExpiry(id: string, expiresAtMs: number | null): Promise<void>;
  pause(id: string): Promise<void>;
  resume(id: string): Promise<void>;
  setNetwork(id: string, policy: NetworkPolicy): Promise<void>;
  /**
   * A TCP connection to `port` of the sandbox, dialled by the node from its own host to the
   * sandbox's address (its caller never dials a node's addresses): bytes both ways until either
   * end closes. It comes paused, its first bytes held: its reader pipes or resumes it. Counts
   * as activity; invalid_argument for a sandbox with loopback only, unavailable when nothing
   * listens there.
   */
  openPort(id: string, port: number): Promise<Duplex>;
  /**
   * The sandbox's changes as a new layer, pinned in the node's layer store until it is named;
   * `under`: the layers it goes on, bottom first (the sandbox's, each fork base of this node made
   * an image layer, pinned too).
   */
  commit(id: string, opts: { exclude?: string[] }): Promise<LayerInfo & { under: string[] }>;
  /** A full VM's display now, as PNG bytes (a paused one is resumed first; invalid_argument for a backend without a display). */
  screen(id: string): Promise<FileBody>;
  /** Keys, text and pointer events to a full VM's display, in order (resumed first, as `screen`). */
  input(id: string, events: InputEvent[]): Promise<void>;
  /** Ids the backends hold on disk that no live sandbox owns, removed. */
  removeLeftovers(): Promise<string[]>;

  // ---- commands and sessions ----
  /** Starts a command (or finds the one its requestId started) and follows it from its start. */
  exec(id: string, req: ExecRequest, commandId?: string): Promise<CommandStream>;
  /** Starts a command (or finds the one its requestId started) and answers at its end. */
  run(id: string, req: ExecRequest, commandId?: string): Promise<CommandResult>;
  /** Starts a command (or finds the one its requestId started); answers its id. */
  start(id: string, req: ExecRequest, commandId?: string): Promise<string>;
  /** Waits for a command's end; not_found for one the edge forgot. */
  result(id: string, commandId: string): Promise<CommandResult>;
  /** Follows a command from byte `offset` of its combined output; not_found for one the edge forgot. */
  follow(id: string, commandId: string, offset: number): Promise<CommandStream>;
  hasCommand(id: string, commandId: string): Promise<boolean>;
  signal(id: string, commandId: string, signal: string): Promise<void>;
  /** A command on a terminal (ExecRequest.pty) gets a new size; invalid_argument for one without. */
  resize(id: string, commandId: string, size: TerminalSize): Promise<void>;
  /** The commands the sandbox runs now (not those of its sessions), oldest first; `finished`: the newest finished ones it keeps too. */
  commands(id: string, o?: { finished?: boolean }): Promise<CommandInfo[]>;
  /** Writes to a command's stdin; `eof` closes it after. */
  stdin(id: string, commandId: string, data: Buffer, eof: boolean): Promise<void>;
  createSession(id: string, p: { cwd?: string; env?: Record<string, string>; user?: string }): Promise<string>;
  deleteSession(id: string, sessionId: string): Promise<void>;
  fnCall(id: string, spec: FnCallSpec): Promise<FnCallOutcome>;

  // ---- FnCall (the node's own workers) ----
  /**
   * Runs a call on one of the node's FnCall workers, made under its admission when none is free
   * (the tenant's within `room`); calls wait per tenant, served in turn. An error with
   * `details.started === false` never reached a worker (another node may take it).
   */
  fnRun(call: EdgeFnCall): Promise<EdgeFnResult>;
  /** Keeps `size` workers of a group warm from now on (python: its zygote started too). */
  fnWarm(group: FnGroupSpec, size: number, language: FnCallSpec['language'] | null): Promise<void>;

  // ---- warm pools (the node's share of each) ----
  /** What the node keeps ready from now on, every pool at once: pools left out lose their members. */
  poolsSet(pools: EdgePoolSpec[]): Promise<void>;
  /** Takes a ready member of a pool out of it (then `claim` it); null when none is ready. */
  poolTake(poolId: string): Promise<string | null>;

  // ---- leases ----
  /**
   * Leases as the control plane knows them now (renewed, lapsed, deleted): each is kept when it is
   * newer than the node's (more renewals); one past its deadline or ended freezes its sandboxes
   * here at once. At most MAX_LEASES_SET a call.
   */
  leasesSet(leases: EdgeLease[]): Promise<void>;

  // ---- files (paths resolve inside the sandbox) ----
  readFile(id: string, path: string): Promise<FileBody>;
  writeFile(id: string, path: string, body: FileBody, mode?: number): Promise<void>;
  statPath(id: string, path: string): Promise<FileEntry>;
  listDir(id: string, path: string, depth: number): Promise<FileEntry[]>;
  /** Makes a path's extended attributes under `prefix` (`user.`…) exactly `attrs` (full names). */
  setAttrs(id: string, path: string, prefix: string, attrs: Record<string, string>): Promise<void>;
  removePath(id: string, path: string, recursive: boolean): Promise<void>;
  makeDir(id: string, path: string): Promise<void>;
  movePath(id: string, from: string, to: string): Promise<void>;
  putArchive(id: string, dir: string, body: FileBody): Promise<void>;
  getArchive(id: string, dir: string): Promise<FileBody>;

  // ---- the node ----
  /** Layer digests the live sandboxes stand on (garbage collection keeps them). */
  layersInUse(): Promise<string[]>;
  /** Lets go of layers removed from the store (unmounts them). */
  forgetLayers(digests: string[]): Promise<void>;
  /** Per-sandbox network counters, Prometheus text. */
  networkMetrics(): Promise<string>;
  /** Runs what is due by the edge's clock now (TTLs, idle timeouts, idle pauses); answers the number of the last event it led to. */
  sweep(): Promise<{ lastEventSeq: number }>;
  /** The edge's events numbered above `after` (none: from now on), until the reader stops. */
  events(after?: number): AsyncIterable<EdgeEvent>;
  /** Stops the edge; `keep` leaves its sandboxes running for the next start to adopt. */
  close(opts: { keep: boolean }): Promise<void>;
}
