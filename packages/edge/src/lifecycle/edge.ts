import { randomBytes } from 'node:crypto';
import { totalmem } from 'node:os';
import type { Socket } from 'node:net';
import type { CommandInfo, ExecRequest, InputEvent } from '@warren/api';
import { WarrenError } from '@warren/api';
import { notRunningHere } from './not-here.js';
import type { BackendCapabilities, SandboxStats } from '../backends/backend.js';
import type { Command } from './command.js';
import { runFnCall, type FnCallOutcome, type FnCallSpec } from '../fn/fn-call.js';
import type { FnWorkers } from '../fn/fn-workers.js';
import type { PoolMembers } from './pool-members.js';
import { ownSandboxes } from './own-sandboxes.js';
import { CpuLoad, checkAdmission, type EdgeCapacity } from './admission.js';
import { endCause, markActivity, newCommandId, newLive, sampledStats, type Live } from './live.js';
import { Commitments } from './commitments.js';
import { checkAlive, removeUnowned, watchEnd } from './liveness.js';
import { LayerRefs } from './layer-refs.js';
import { defaultOutputBudget } from './output-budget.js';
import type { EdgeOptions, EdgeSandboxSpec, EdgeSandboxState } from './edge-spec.js';
import { OutputBudgets, closeSession, endSessionLines, launchCommand, listedCommands, openSession, pruneCommands, pruneDue } from './commands.js';
import { SandboxFiles } from './files.js';
import { configureSandbox } from './setup.js';
import { startSandbox, type StartContext } from './start-sandbox.js';
import { EdgeEvents } from './events.js';
import { BackendSet, capable } from './backend-set.js';
import type { LayerInfo } from '@warren/images';
import { stopReclaim } from './reclaim.js';
import { dialSandboxPort } from '../net/port-dial.js';
import { Freezes, pauseLive, resumeLive, type PauseContext } from './pause.js';
import { SandboxNetworks } from './networks.js';
import { defaultMemoryFloorMiB, dueNow } from './housekeeping.js';
import { MemoryPressure } from './pressure.js';
import { memAvailableMiB } from '../host/proc.js';
import { Semaphore } from '../util/semaphore.js';
import { mapLimit } from '../util/map-limit.js';
import { InFlight } from '../util/in-flight.js';
import { EdgeLeases } from './leases.js';
import { FrozenStates } from './frozen-states.js';

export type { EdgeCapacity } from './admission.js';
export type { EdgeOptions, EdgeSandboxSpec, EdgeSandboxState } from './edge-spec.js';

/**
 * A node agent: admission against local capacity, the lifecycle of every sandbox on the node,
 * its commands and sessions, and TTL/idle enforcement. Backends only make and remove sandboxes.
 */
export class Edge {
  private readonly live = new Map<string, Live>();
  /** The layers the live sandboxes stand on, counted. */
  private readonly layerRefs = new LayerRefs();
  /** What the sandboxes commit (requests, paused ones' relief, counts), kept as they change. */
  private readonly commitments = new Commitments();
  private readonly output: OutputBudgets;
  private readonly freezes = new Freezes();
  /** Commits and fork bases: what a sandbox's state becomes, frozen for a moment. */
  readonly frozen: FrozenStates;
  private readonly backendSet: BackendSet;
  /** What the edge tells its owner: pauses and resumes, TTLs and idle timeouts passed, deaths. */
  readonly events = new EdgeEvents();
  /** Made anew each time an edge starts: what tells its owner the edge restarted (and its events numbered anew). */
  readonly boot = randomBytes(8).toString('hex');
  private readonly creating = new InFlight(() => new WarrenError('unavailable', 'the node is stopping', { node: this.o.nodeId }));
  private timer: NodeJS.Timeout | null = null;
  readonly maxFileBytes: number;

  /** File operations inside a sandbox (each one counts as activity and resumes a paused sandbox). */
  readonly files: SandboxFiles;
  /** The sandboxes' networks: rules, addresses, counters. */
  readonly networks: SandboxNetworks;
  /** What pausing and resuming needs of the edge. */
  private readonly pauses: PauseContext;
  /** The node's FnCall workers and warm pools' members (its own sandboxes: listed nowhere, no events). */
  readonly fn: FnWorkers;
  readonly pools: PoolMembers;
  /** The leases its sandboxes hold: once one lapses, they are frozen here, control plane or not. */
  readonly leases: EdgeLeases;
  /** Real memory pressure: idle sandboxes paged out, then paused; creates refused once that cannot make room. */
  private readonly pressure: MemoryPressure;
  /** What a create's steps use of this edge (startSandbox), made once. */
  private readonly starting: StartContext;

  constructor(private readonly o: EdgeOptions) {
    this.output = new OutputBudgets(o.maxRetainedOutputBytes ?? defaultOutputBudget(totalmem()));
    this.maxFileBytes = o.maxFileBytes ?? 1024 * 1024 * 1024;
    this.files = new SandboxFiles({
      touch: (id) => this.touch(id),
      exec: (id, req) => this.exec(id, req),
      maxFileBytes: this.maxFileBytes,
    });
    this.cpuLoad = new CpuLoad(o.now);
    this.networks = new SandboxNetworks(o.network, (id) => this.get(id));
    this.pauses = {
      now: () => this.now(),
      events: this.events,
      logger: o.logger,
      pageouts: new Semaphore(2),
      changed: (id) => this.commitments.update(id, this.live.get(id)),
    };
    this.backendSet = new BackendSet(o.backends);
    this.frozen = new FrozenStates({
      backends: this.backendSet.all,
      refs: this.layerRefs,
      freezes: this.freezes,
      get: (id) => this.get(id),
      live: (id) => this.live.has(id),
      able: (id, what, verb) => this.able(id, what, verb),
      failpoint: o.failpoint,
    });
    this.pressure = new MemoryPressure({
      nodeId: o.nodeId,
      floorMiB: o.memoryFloorMiB ?? defaultMemoryFloorMiB(totalmem()),
      live: this.live,
      availableMiB: o.memoryAvailableMiB ?? memAvailableMiB,
      now: () => this.now(),
      pageOut: async (id) => void (await this.live.get(id)?.backend.pageOut?.(id)),
      pauseReclaimed: (id) => this.pauseReclaimed(id),
      logger: o.logger,
    });
    // Frozen at once; paged out (two at a time) only when kept: a lease that says delete removes them next.
    this.leases = new EdgeLeases({
      now: () => this.now(),
      holders: (lease) => [...this.live].filter(([, l]) => l.spec.lease?.id === lease).map(([id, l]) => ({ id, paused: l.spec.paused })),
      freeze: (id, reclaim) => this.pause(id, { reclaim, gated: true }),
      thaw: (id) => this.resume(id),
      logger: o.logger,
    });
    this.starting = {
      backends: this.backendSet,
      admit: (r) => this.admit(r),
      commitments: this.commitments,
      network: o.network,
      layerRefs: this.layerRefs,
      pressure: this.pressure,
      maxFileBytes: this.maxFileBytes,
      live: this.live,
      now: () => this.now(),
      ended: (id, l) => this.ended(id, l),
      holdLease: (spec) => this.holdLease(spec),
    };
    ({ fn: this.fn, pools: this.pools } = ownSandboxes(
      {
        create: (spec) => this.create(spec),
        destroy: (id) => this.destroy(id),
        fnCall: (id, spec) => this.fnCall(id, spec),
        has: (id) => this.live.has(id),
        now: () => this.now(),
        logger: o.logger,
      },
      o.fn,
    ));
  }

  /** Whether a sandbox is the node's own (a FnCall worker, a pool's member), not anyone's yet. */
  private own(id: string): boolean {
    return this.fn.owns(id) || this.pools.owns(id);
  }

  get nodeId(): string {
    return this.o.nodeId;
  }

  /** The node's backends by name and what each can do (the first is the default). */
  backends(): Array<{ name: string; capabilities: BackendCapabilities }> {
    return this.backendSet.describe();
  }

  /** The lifecycle's clock (activity, pauses, TTLs, the sweep): EdgeOptions.now, tests advance their own. */
  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  start(): void {
    this.timer = setInterval(() => this.sweep(), this.o.sweepMs ?? 1000);
    this.timer.unref();
    this.fn.start();
    this.pools.start();
  }

  capacity(): EdgeCapacity {
    return this.o.capacity;
  }

  /**
   * What admission counts: CPUs and memory requested by running sandboxes (and the memory a
   * VMM holds beyond its guest's size, as last sampled); a paused one counts the memory still
   * resident after its reclaim, up to its request, and no CPU (PausedLedger).
   */
  usage(): { cpu: number; memoryMiB: number; sandboxes: number; paused: number } {
    const c = this.commitments.committed();
    return { ...c, memoryMiB: c.memoryMiB + this.backendSet.heldBeyondRequestsMiB() };
  }

  /** The cores the node's sandboxes use together, sampled by the sweep (and by `used`). */
  private readonly cpuLoad: CpuLoad;

  /** What the node's sandboxes use together: CPUs lately (~10 s), memory resident and in swap (MiB). */
  async used(): Promise<{ cpu: number; memoryMiB: number; swapMiB: number }> {
    const t = await this.backendSet.totals();
    this.cpuLoad.sample(t.cpuSeconds);
    return { cpu: Math.round(this.cpuLoad.cores * 100) / 100, memoryMiB: Math.round(t.memoryBytes / 2 ** 20), swapMiB: Math.round(t.swapBytes / 2 ** 20) };
  }

  /** Samples what the sandboxes use, for admission (the sweep calls it every second). */
  async sampleCpu(): Promise<void> {
    this.cpuLoad.sample((await this.backendSet.totals()).cpuSeconds);
  }

  /** A live sandbox whose backend can do `what`; invalid_argument if it cannot. */
  private able(id: string, what: keyof BackendCapabilities, verb: string): Live {
    return capable(this.get(id), id, what, verb);
  }

  /** How many sandboxes each backend runs, and how many of them are paused (a walk over all: for reports). */
  byBackend(): Record<string, { sandboxes: number; paused: number }> {
    return this.commitments.byBackend(this.backendSet.all.map((b) => b.name));
  }

  /** What the node's sandboxes requested in all (paused ones included), for reports. */
  requested(): { cpu: number; memoryMiB: number } {
    return this.commitments.requested();
  }

  /** Checks that the node can take a sandbox of this size; throws resource_exhausted if not (see checkAdmission). */
  admit(r: EdgeSandboxSpec['resources']): void {
    checkAdmission(this.o.nodeId, this.o.capacity, Object.assign(this.usage(), { cpuUsed: this.cpuLoad.cores }), r);
  }

  /**
   * Starts a sandbox and applies its workdir and files before returning. Admitted by its memory
   * request before the first await; then the memory it requests is made available (pressure).
   */
  create(spec: EdgeSandboxSpec, files: Array<{ path: string; content: Buffer; mode?: number }> = []): Promise<void> {
    // A close waits for the creates under way (then removes them with the rest): none is left behind.
    return this.creating.run(() => startSandbox(this.starting, spec, files));
  }

  /**
   * Hands a running sandbox (a warm pool's) to a caller: its spec becomes `spec` (same layers,
   * resources and network; the caller's env, user, workdir, lifetime), then user, workdir and
   * files are applied. On failure the sandbox is left as it was; the caller removes it.
   */
  async claim(spec: EdgeSandboxSpec, files: Array<{ path: string; content: Buffer; mode?: number }> = []): Promise<void> {
    const l = this.get(spec.id);
    if (l.spec.paused || l.pausing) await this.resume(spec.id);
    await configureSandbox(l.sb.connect, spec, files, this.maxFileBytes);
    l.spec = Object.assign({}, spec, { layers: l.spec.layers, resources: l.spec.resources, network: l.spec.network, paused: false });
    this.commitments.update(spec.id, l);
    this.holdLease(l.spec);
  }

  /** Learns a sandbox's lease; one that lapsed already freezes it at once. */
  private holdLease(spec: EdgeSandboxSpec): void {
    if (!spec.lease) return;
    if (!this.leases.learn(spec.lease)) throw new WarrenError('resource_exhausted', 'this node keeps as many leases as it may', { lease: spec.lease.id });
    if (this.leases.lapsed(spec.lease.id)) this.leases.freezeLate(spec.lease.id, spec.id);
  }

  /** Takes back a sandbox after a restart; false when its processes are gone. */
  async adopt(spec: EdgeSandboxSpec): Promise<boolean> {
    const backend = this.backendSet.pick(spec);
    const sb = await backend.adopt(spec.id);
    if (!sb) return false;
    // A sandbox from before its node had networking keeps the empty namespace it has.
    if (backend.capabilities.network) await this.o.network?.adopt(spec.id, spec.network);
    spec.paused = false;
    const l = newLive(spec, sb, backend, this.now());
    this.live.set(spec.id, l);
    this.commitments.update(spec.id, l);
    await watchEnd(this.live, spec.id, l, this.ended);
    // The OOM kills before it was taken back are no command's.
    l.oomKillsSeen = (await backend.oomKills?.(spec.id).catch(() => null)) ?? 0;
    l.limitsSeen = (await backend.limitCounts?.(spec.id).catch(() => null)) ?? null;
    this.layerRefs.hold(spec.layers);
    this.holdLease(spec);
    this.commitments.hold(spec.resources);
    return true;
  }

  has(id: string): boolean {
    return this.live.has(id);
  }

  /**
   * The live state of these sandboxes (all when `ids` is absent); those not live here are left
   * out. `touched`: only those with activity since the last such call (which it clears). Their
   * usage files are read 32 sandboxes at a time (one by one, a page of 1,000 took seconds).
   */
  async states(q: { ids?: string[]; usage?: boolean; touched?: boolean } = {}): Promise<EdgeSandboxState[]> {
    const ids = (q.ids ?? [...this.live.keys()].filter((id) => !this.own(id))).filter((id) => {
      const l = this.live.get(id);
      if (q.touched && l?.touched) l.touched = false;
      else if (q.touched) return false;
      return l !== undefined;
    });
    const out = await mapLimit(ids, 32, async (id): Promise<EdgeSandboxState | null> => {
      const no = (): null => null;
      const [usage, network] = await Promise.all([q.usage ? this.stats(id).catch(no) : null, this.networks.view(id, q.usage ?? false).catch(no)]);
      const l = this.live.get(id);
      return l ? { id, paused: l.spec.paused, lastActivityMs: l.spec.lastActivityMs, expiresAtMs: l.spec.expiresAtMs, usage, network } : null;
    });
    return out.filter((x) => x !== null);
  }

  private get(id: string): Live {
    const l = this.live.get(id);
    if (!l) throw notRunningHere(id);
    return l;
  }

  /** Marks API activity and thaws a paused sandbox (any call on a paused sandbox resumes it). */
  private async touch(id: string): Promise<Live> {
    const l = this.get(id);
    markActivity(l, this.now());
    if (l.spec.paused) await this.resume(id);
    return l;
  }

  /** Counts as activity on the sandbox (and resumes it when paused), e.g. traffic to its ports. */
  markActive = async (id: string): Promise<void> => void (await this.touch(id));

  lastActivity(id: string): number | null {
    return this.live.get(id)?.spec.lastActivityMs ?? null;
  }

  setExpiry(id: string, expiresAtMs: number | null): void {
    this.get(id).spec.expiresAtMs = expiresAtMs;
  }

  /** The sandbox's TTL deadline as it stands (it moves on when the sandbox was paused). */
  expiry(id: string): number | null {
    return this.get(id).spec.expiresAtMs;
  }

  async destroy(id: string): Promise<void> {
    const l = this.live.get(id);
    if (l) {
      this.live.delete(id);
      this.commitments.update(id, undefined);
      endSessionLines(l);
      this.layerRefs.release(l.spec.layers);
      for (const c of l.commands.values()) c.release();
      this.commitments.release(l.spec.resources);
      await stopReclaim(l);
    }
    try {
      // One the edge does not hold (a leftover) is looked for in every backend.
      for (const b of l ? [l.backend] : this.backendSet.all) await b.destroy(id);
    } finally {
      await this.o.network?.detach(id);
    }
    // Layers no sandbox stands on any more may be let go (on-demand ones then leave the cache);
    // one a sandbox made meanwhile stands on again stays.
    if (l) {
      const inUse = this.layerRefs.inUse();
      const idle = l.spec.layers.filter((d) => !inUse.has(d));
      if (idle.length) await l.backend.releaseLayers(idle).catch(() => undefined);
    }
  }

  /** Freezes a sandbox; its memory is paged out in the background unless `reclaim` is false (`gated`: two page-outs at a time; `reason`: the node's memory). */
  async pause(id: string, o: { reclaim?: boolean; gated?: boolean; reason?: 'memory' } = {}): Promise<void> {
    const l = this.able(id, 'pause', 'be paused');
    await pauseLive(l, id, this.pauses, o);
  }

  /** Pauses a sandbox for the node's memory and waits for its page-out. */
  private async pauseReclaimed(id: string): Promise<void> {
    await this.pause(id, { reason: 'memory' });
    await this.live.get(id)?.reclaim?.done;
  }

  async resume(id: string): Promise<void> {
    // Never while its files are read for a commit or a fork (see Freezes.idle).
    await this.freezes.idle(id);
    await resumeLive(this.get(id), id, this.pauses);
  }

  /** The sandbox's changes as a new layer (see FrozenStates.commit). */
  commit(id: string, opts: { exclude?: string[] } = {}): Promise<LayerInfo & { under: string[] }> {
    return this.frozen.commit(id, opts);
  }

  /** A full VM's display now, as a PNG; counts as activity (a paused one is resumed first). */
  async screen(id: string): Promise<Buffer> {
    const l = this.able(id, 'display', 'show a screen');
    await this.touch(id);
    return l.backend.screen!(id);
  }

  /** Keys, text and pointer events to a full VM's display, in order; counts as activity, as `screen`. */
  async input(id: string, events: InputEvent[]): Promise<void> {
    const l = this.able(id, 'display', 'take display input');
    await this.touch(id);
    await l.backend.input!(id, events);
  }

  /** Unmounts layers that were removed from the store (none of them is in use). */
  async forgetLayers(digests: string[]): Promise<void> {
    for (const b of this.backendSet.all) await b.forgetLayers(digests);
  }

  /** Layer digests the live sandboxes of this node stand on (garbage collection keeps them). */
  layersInUse(): Set<string> {
    return this.layerRefs.inUse();
  }

  /**
   * A connection from this host to `port` of the sandbox, at its link address (EdgeApi.openPort:
   * paused until read); counts as activity. invalid_argument for one with loopback only.
   */
  async openPort(id: string, port: number): Promise<Socket> {
    this.able(id, 'ports', 'serve ports');
    const host = this.networks.address(id);
    if (!host) throw new WarrenError('invalid_argument', 'this sandbox has loopback only: nothing can reach its ports', { id });
    await this.markActive(id);
    return dialSandboxPort(host, port);
  }

  isPaused(id: string): boolean {
    return this.get(id).spec.paused;
  }

  /** CPU (total, and recent: cores used since the previous sample a second or more ago), memory, swap, idle time. */
  async stats(id: string): Promise<SandboxStats & { cpuRecent: number; idleSeconds: number }> {
    const l = this.get(id);
    return sampledStats(l, await l.backend.stats(id), this.now());
  }

  // ---- commands ----

  /**
   * Starts a command (named `commandId`, when the caller chose it ahead), or returns the one
   * that carried the same requestId: a retried request never runs twice, concurrent retries
   * included.
   */
  async exec(id: string, req: ExecRequest, commandId: string = newCommandId()): Promise<Command> {
    const l = await this.touch(id);
    const rid = req.requestId;
    if (rid === undefined) return this.launch(l, req, commandId);
    const known = l.requestIds.get(rid);
    const cmd = known ? l.commands.get(known) : undefined;
    if (cmd) return cmd;
    const pending = l.pendingRequests.get(rid);
    if (pending) return pending;
    const started = this.launch(l, req, commandId);
    l.pendingRequests.set(rid, started);
    try {
      return await started;
    } finally {
      l.pendingRequests.delete(rid);
    }
  }

  /** Whether the edge still holds a command (it forgets them after retention or a restart); notRunningHere for a sandbox it does not run. */
  hasCommand(id: string, commandId: string): boolean {
    return this.get(id).commands.has(commandId);
  }

  private async launch(l: Live, req: ExecRequest, cmdId: string): Promise<Command> {
    const now = Date.now();
    if (pruneDue(l, now)) pruneCommands(l, now, this.o.commandRetentionMs ?? 10 * 60_000);
    return launchCommand(
      l,
      req,
      cmdId,
      this.output.forCommand(l, () => this.live.values()),
      () => this.now(),
      () => this.touch(l.spec.id),
    );
  }

  /** Runs one call on a FnCall worker (resumed first if it was paused). */
  async fnCall(id: string, spec: FnCallSpec): Promise<FnCallOutcome> {
    const l = await this.touch(id);
    if (!l.spec.fn) throw new WarrenError('internal', 'not a FnCall worker', { id });
    try {
      return await runFnCall(l.sb.connect, spec);
    } finally {
      markActivity(l, this.now());
    }
  }

  /** The commands `id` runs now (`finished`: and the newest finished ones it keeps), not those of its sessions, oldest first. */
  commandList(id: string, finished = false): CommandInfo[] {
    return listedCommands(this.get(id).commands.values(), finished).map((c) => c.info());
  }

  command(id: string, commandId: string): Command {
    const cmd = this.get(id).commands.get(commandId);
    if (!cmd) throw new WarrenError('not_found', 'no such command', { id, commandId });
    return cmd;
  }

  // ---- sessions ----

  async createSession(id: string, p: { cwd?: string; env?: Record<string, string>; user?: string }): Promise<string> {
    return openSession(await this.touch(id), p);
  }

  async deleteSession(id: string, sessionId: string): Promise<void> {
    await closeSession(await this.touch(id), sessionId);
  }

  // ---- housekeeping ----

  private sweeps = 0;

  private sweep(): void {
    if (++this.sweeps % 2 === 0) void checkAlive(this.live, this.ended);
    if (this.o.capacity.busyCpu !== undefined) this.sampleCpu().catch(() => undefined);
    void this.sweepNow();
    void this.pressure.run().catch((e: unknown) => this.o.logger?.warn('memory pressure relief failed', { error: String(e) }));
    this.leases.check();
    if (this.sweeps % 60 === 0) this.leases.prune(new Set([...this.live.values()].flatMap((l) => (l.spec.lease ? [l.spec.lease.id] : []))));
  }

  /**
   * What is due by the clock: TTLs and idle timeouts passed go to the owner (onExpired), idle
   * pauses are made; resolves once those pauses are. The sweep runs it every second; tests with
   * an injected clock call it after advancing the clock.
   */
  async sweepNow(): Promise<void> {
    const pauses: Array<Promise<void>> = [];
    for (const { id, due } of dueNow(this.live, this.now())) {
      if (due !== 'pause') this.events.emit({ type: 'expired', id, reason: due });
      else pauses.push(this.pause(id).catch((e: unknown) => this.o.logger?.warn('auto-pause failed', { id, error: String(e) })));
    }
    await Promise.all(pauses);
  }

  /** A sandbox's init ended without the edge ending it: its owner hears it died. */
  private readonly ended = async (id: string, l: Live): Promise<void> => {
    this.o.logger?.warn('sandbox init exited', { id });
    if (this.fn.owns(id)) this.fn.died(id);
    else if (this.pools.owns(id)) this.pools.died(id);
    else this.events.emit({ type: 'died', id, ...(await endCause(l)) });
  };

  /** Removes sandboxes the backend still has on disk that nobody owns any more. */
  async removeLeftovers(): Promise<string[]> {
    const gone = await removeUnowned(this.backendSet.all, this.live);
    await this.frozen.leftovers();
    return gone;
  }

  /** Stops the sweep; with `keep`, leaves sandboxes running for the next start to adopt. */
  async close(opts: { keep: boolean }): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.creating.close();
    this.leases.close();
    await Promise.all([this.fn.close(), this.pools.close()]);
    if (!opts.keep) await mapLimit([...this.live.keys()], 16, (id) => this.destroy(id).catch(() => undefined));
    await this.o.network?.close({ keep: opts.keep && this.live.size > 0 });
    for (const b of this.backendSet.all) await b.close({ keepLayers: opts.keep && this.live.size > 0 });
  }
}
