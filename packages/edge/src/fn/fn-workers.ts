import { createHash } from 'node:crypto';
import { cpus } from 'node:os';
import { DEFAULT_PATH, WarrenError, type CpuClass } from '@warren/api';
import type { FnCallOutcome, FnCallSpec } from './fn-call.js';

/** What a worker is made of: an image's layers and one size. Workers of one group are interchangeable. */
export interface FnGroupSpec {
  /** The image's name, for stats and logs. */
  image: string;
  layers: string[];
  /** Whether Warren built the image (its python3 may start the zygote: see FnCallSpec.zygote). */
  builtIn: boolean;
  /** cpuClass: batch for bulk calls' workers (POST /v1/fn/batch); absent: latency. */
  resources: { cpu: number; memoryMiB: number; pids: number; cpuClass?: CpuClass };
}

/** What one tenant may still hold in workers made for its calls on this node (its quota less its sandboxes and the rest); absent: no limit. */
export interface FnRoom {
  sandboxes?: number;
  cpu?: number;
  memoryMiB?: number;
}

/** One call as the control plane hands it to a node. */
export interface EdgeFnCall {
  tenant: string;
  /** Null: the tenant has no quota. */
  room: FnRoom | null;
  group: FnGroupSpec;
  spec: FnCallSpec;
}

/** A call's answer, with what the node's workers for this tenant hold after it (for the tenant's quota). */
export interface EdgeFnResult {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
  queuedMs: number;
  timedOut: boolean;
  truncated: boolean;
  /** A worker was started for this call (it waited for one: a cold start). */
  cold: boolean;
  held: FnHeld;
  /** When `held` was read, on the clock of the node's load (`EdgeLoad.at`): of it and a heartbeat's, the later is the truer. */
  heldAt: number;
}

/** What the workers made for one tenant's calls hold on a node (they count in its quota). */
export interface FnHeld {
  sandboxes: number;
  cpu: number;
  memoryMiB: number;
}

/** The most tenants a node's load names in FnLoad.tenants (those holding most first). */
export const MAX_FN_LOAD_TENANTS = 4096;

/** The clock of a node's load (`EdgeLoad.at`): ms since the epoch, monotonic within the process. */
export const loadClock = (): number => performance.timeOrigin + performance.now();

/** The node's FnCall workers, in its load (/v1/nodes, /metrics, placement). */
export interface FnLoad {
  groups: Array<{ key: string; image: string; workers: number; busy: number; queued: number }>;
  calls: number;
  timedOut: number;
  failed: number;
  rejected: number;
  coldStarts: number;
  /** Time calls waited for a worker, all together (ms). */
  queuedMs: number;
  /**
   * What the workers made for each tenant's calls hold here, for tenants holding any: every
   * replica counts them in the tenant's quota, also those of calls another replica sent.
   */
  tenants: Array<FnHeld & { tenant: string }>;
}

export interface FnWorkersOptions {
  /** The most workers of one group (default twice the CPUs, at least 4). */
  maxWorkersPerImage?: number;
  /** Calls one tenant may have waiting on this node, all groups together (default 10 000). */
  queueLimit?: number;
  /** Workers beyond a pool's size are removed after this long without a call (default 30 s). */
  idleMs?: number;
  logger?: { warn(msg: string, meta?: unknown): void };
}

/** What the workers need of their node. */
export interface FnNode {
  /** Starts worker `id` of group `g` (a container sandbox that runs only FnCalls, no network), under the node's admission. */
  create(id: string, g: FnGroupSpec): Promise<void>;
  destroy(id: string): Promise<void>;
  call(id: string, spec: FnCallSpec): Promise<FnCallOutcome>;
  newId(): string;
}

interface Worker {
  id: string;
  busy: boolean;
  lastUsedMs: number;
  /** The tenant whose waiting calls it was made for, whose quota it counts in (null: a pool's). */
  tenant: string | null;
}

interface Waiting {
  tenant: string;
  room: FnRoom | null;
  spec: FnCallSpec;
  enqueuedMs: number;
  cold: boolean;
  resolve: (r: EdgeFnResult) => void;
  reject: (e: unknown) => void;
  retried: boolean;
}

interface Group extends FnGroupSpec {
  key: string;
  workers: Worker[];
  creating: number;
  /** Workers being made, by the tenant they are made for. */
  creatingFor: Map<string, number>;
  /** Kept at least this many (a pool). */
  min: number;
  warmLanguage: FnCallSpec['language'] | null;
  queues: Map<string, Waiting[]>;
  /** Tenants with waiting calls, in the order they are served (round robin). */
  turn: string[];
  lastError: WarrenError | null;
  retryAtMs: number;
}

/** Group keys by what they hash (every call asks for its group's, on the server and the edge). */
const groupKeys = new Map<string, string>();
const GROUP_KEYS_MAX = 1024;

/** The key of a group: its layers, its size and CPU class, hashed (it travels in every heartbeat). */
export function fnGroupKey(g: Pick<FnGroupSpec, 'layers' | 'resources'>): string {
  const what = `${g.layers.join(',')}|${g.resources.cpu}|${g.resources.memoryMiB}|${g.resources.pids}${g.resources.cpuClass === 'batch' ? '|batch' : ''}`;
  let key = groupKeys.get(what);
  if (key === undefined) {
    key = createHash('sha256').update(what).digest('hex').slice(0, 32);
    if (groupKeys.size >= GROUP_KEYS_MAX) groupKeys.clear();
    groupKeys.set(what, key);
  }
  return key;
}

/** The call that starts a Python worker's zygote (the first Python call: this one, not a caller's). */
const warmUp = (builtIn: boolean): FnCallSpec => ({
  language: 'python',
  code: 'pass',
  env: [`PATH=${DEFAULT_PATH}`, 'HOME=/root', 'LANG=C.UTF-8'],
  cwd: '/tmp',
  timeoutMs: 30_000,
  files: [],
  maxOutputBytes: 1024,
  zygote: builtIn,
});

/**
 * A node's FnCall workers: warm, reused container sandboxes whose init gives each call new
 * namespaces and a fresh writable layer (native/fn.c). Each runs one call at a time (its cgroup
 * is the call's limit); calls wait in per-tenant queues served round robin, and a group gets
 * more workers while calls wait, up to a limit, each made under the node's own admission. The
 * node owns them: they are not sandboxes of anyone's, listed nowhere, and go when it stops.
 */
export class FnWorkers {
  private readonly groups = new Map<string, Group>();
  private readonly queued = new Map<string, number>();
  private readonly owned = new Set<string>();
  private readonly maxWorkers: number;
  private readonly queueLimit: number;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly counts = { calls: 0, timedOut: 0, failed: 0, rejected: 0, coldStarts: 0, queuedMs: 0 };

  constructor(
    private readonly node: FnNode,
    private readonly o: FnWorkersOptions = {},
  ) {
    this.maxWorkers = o.maxWorkersPerImage ?? Math.max(4, 2 * cpus().length);
    this.queueLimit = o.queueLimit ?? 10_000;
  }

  /** Starts the removal of idle workers (and keeps pools at their size). */
  start(): void {
    this.timer = setInterval(() => this.tick(), 1000);
    this.timer.unref();
  }

  /** Keeps `size` workers of a group warm (python: its zygote started too). */
  keepWarm(g: FnGroupSpec, size: number, language: FnCallSpec['language'] | null): void {
    const group = this.group(g);
    group.min = Math.max(group.min, size);
    group.warmLanguage ??= language;
    this.grow(group);
  }

  /** Whether a sandbox id is one of the workers. */
  owns(id: string): boolean {
    return this.owned.has(id);
  }

  /** A worker died: it is forgotten (and replaced when calls need one). */
  died(id: string): void {
    for (const g of this.groups.values()) g.workers = g.workers.filter((w) => w.id !== id);
    if (this.owned.delete(id)) void this.node.destroy(id).catch(() => undefined);
  }

  /** Runs one call on a worker of its group, once one is free; resource_exhausted when the tenant has queueLimit waiting here. */
  run(c: EdgeFnCall): Promise<EdgeFnResult> {
    if (this.closed) throw new WarrenError('unavailable', 'this node is shutting down', { started: false });
    const waiting = this.queued.get(c.tenant) ?? 0;
    if (waiting + 1 > this.queueLimit) {
      this.counts.rejected++;
      throw new WarrenError('resource_exhausted', `this tenant has ${waiting} calls waiting; at most ${this.queueLimit} may wait`, {
        queued: waiting,
        queueLimit: this.queueLimit,
      });
    }
    const g = this.group(c.group);
    g.warmLanguage ??= c.spec.language;
    const p = new Promise<EdgeFnResult>((resolve, reject) => {
      this.push(g, { tenant: c.tenant, room: c.room, spec: c.spec, enqueuedMs: Date.now(), cold: false, resolve, reject, retried: false });
    });
    this.dispatch(g);
    this.grow(g);
    return p;
  }

  private push(g: Group, w: Waiting, front = false): void {
    let q = g.queues.get(w.tenant);
    if (!q) {
      q = [];
      g.queues.set(w.tenant, q);
      g.turn.push(w.tenant);
    }
    if (front) q.unshift(w);
    else q.push(w);
    this.queued.set(w.tenant, (this.queued.get(w.tenant) ?? 0) + 1);
  }

  /** The next waiting call, taking tenants in turn. */
  private next(g: Group): Waiting | null {
    while (g.turn.length) {
      const tenant = g.turn.shift()!;
      const q = g.queues.get(tenant);
      const w = q?.shift();
      if (!w) {
        g.queues.delete(tenant);
        continue;
      }
      if (q!.length) g.turn.push(tenant);
      else g.queues.delete(tenant);
      const n = (this.queued.get(tenant) ?? 1) - 1;
      if (n) this.queued.set(tenant, n);
      else this.queued.delete(tenant);
      return w;
    }
    return null;
  }

  private waitingIn(g: Group): number {
    let n = 0;
    for (const q of g.queues.values()) n += q.length;
    return n;
  }

  private group(spec: FnGroupSpec): Group {
    const key = fnGroupKey(spec);
    let g = this.groups.get(key);
    if (!g) {
      g = {
        key,
        image: spec.image,
        layers: spec.layers,
        builtIn: spec.builtIn,
        resources: spec.resources,
        workers: [],
        creating: 0,
        creatingFor: new Map(),
        min: 0,
        warmLanguage: null,
        queues: new Map(),
        turn: [],
        lastError: null,
        retryAtMs: 0,
      };
      this.groups.set(key, g);
    }
    return g;
  }

  /** Hands free workers the waiting calls. */
  private dispatch(g: Group): void {
    for (const worker of g.workers) {
      if (worker.busy) continue;
      const w = this.next(g);
      if (!w) return;
      worker.busy = true;
      void this.runOn(g, worker, w);
    }
  }

  private async runOn(g: Group, worker: Worker, w: Waiting): Promise<void> {
    const start = Date.now();
    try {
      const out = await this.node.call(worker.id, w.spec);
      const end = Date.now();
      this.counts.calls++;
      this.counts.queuedMs += start - w.enqueuedMs;
      if (w.cold) this.counts.coldStarts++;
      if (out.timedOut) this.counts.timedOut++;
      w.resolve({
        stdout: out.stdout.toString('utf8'),
        stderr: out.stderr.toString('utf8'),
        exitCode: out.exitCode,
        signal: out.signal,
        durationMs: end - start,
        queuedMs: start - w.enqueuedMs,
        timedOut: out.timedOut,
        truncated: out.truncated,
        cold: w.cold,
        held: this.held(w.tenant),
        heldAt: loadClock(),
      });
    } catch (e) {
      if (e instanceof WarrenError && (e.code === 'unavailable' || e.code === 'not_found' || e.code === 'internal')) {
        // The worker is gone or broken, not the call: a new worker takes it (once).
        this.o.logger?.warn('a FnCall worker failed a call; it is replaced', { worker: worker.id, error: e.message, retried: w.retried });
        this.retire(g, worker);
        if (!w.retried && !this.closed) {
          w.retried = true;
          this.push(g, w, true);
          this.grow(g);
          return;
        }
      }
      this.counts.failed++;
      w.reject(e);
    } finally {
      worker.busy = false;
      worker.lastUsedMs = Date.now();
      this.dispatch(g);
    }
  }

  /**
   * More workers while calls wait and the group may have more: the pool's first (no tenant's),
   * then one for each waiting call, made for the tenants whose calls wait, in turn, each within
   * the room its quota leaves (a worker counts there as a sandbox of its size while it lives). A
   * tenant past it waits for the workers there are; with none at all, its calls fail.
   */
  private grow(g: Group): void {
    if (this.closed || Date.now() < g.retryAtMs) return;
    const idle = g.workers.filter((w) => !w.busy).length;
    const pool = Math.max(0, g.min - g.workers.length - g.creating);
    let more = Math.min(this.waitingIn(g) - idle - g.creating, this.maxWorkers - g.workers.length - g.creating) - pool;
    for (let i = 0; i < pool; i++) void this.addWorker(g, null);
    const refused = new Map<string, WarrenError>();
    for (let progress = true; more > 0 && progress; ) {
      progress = false;
      for (const tenant of g.turn) {
        const q = g.queues.get(tenant);
        if (more <= 0 || !q?.length || refused.has(tenant) || (g.creatingFor.get(tenant) ?? 0) >= q.length) continue;
        const over = this.overRoom(tenant, q[0]!.room, g.resources);
        if (over) {
          refused.set(tenant, over);
          continue;
        }
        // The call this worker is made for waited for a start: a cold one.
        const first = q.find((w) => !w.cold);
        if (first) first.cold = true;
        void this.addWorker(g, tenant);
        more--;
        progress = true;
      }
    }
    if (g.workers.length === 0 && g.creating === 0) {
      for (const [tenant, err] of refused) {
        const q = g.queues.get(tenant) ?? [];
        g.queues.delete(tenant);
        g.turn = g.turn.filter((t) => t !== tenant);
        const left = (this.queued.get(tenant) ?? 0) - q.length;
        if (left > 0) this.queued.set(tenant, left);
        else this.queued.delete(tenant);
        this.counts.rejected += q.length;
        for (const w of q) w.reject(err);
      }
    }
  }

  /** Why one more worker of this size for `tenant` would not fit the room its quota leaves (null: it fits). */
  private overRoom(tenant: string, room: FnRoom | null, r: { cpu: number; memoryMiB: number }): WarrenError | null {
    if (!room) return null;
    const h = this.held(tenant);
    if (
      (room.sandboxes !== undefined && h.sandboxes + 1 > room.sandboxes) ||
      (room.cpu !== undefined && h.cpu + r.cpu > room.cpu + 1e-9) ||
      (room.memoryMiB !== undefined && h.memoryMiB + r.memoryMiB > room.memoryMiB)
    )
      return new WarrenError('resource_exhausted', `tenant "${tenant}" is over its quota`, { room, fnWorkers: h });
    return null;
  }

  /** What the workers made for a tenant hold on this node (they count in its quota). */
  held(tenant: string): FnHeld {
    const out = { sandboxes: 0, cpu: 0, memoryMiB: 0 };
    for (const g of this.groups.values()) {
      const n = g.workers.filter((w) => w.tenant === tenant).length + (g.creatingFor.get(tenant) ?? 0);
      out.sandboxes += n;
      out.cpu += n * g.resources.cpu;
      out.memoryMiB += n * g.resources.memoryMiB;
    }
    return out;
  }

  private async addWorker(g: Group, tenant: string | null): Promise<void> {
    const id = this.node.newId();
    g.creating++;
    if (tenant !== null) g.creatingFor.set(tenant, (g.creatingFor.get(tenant) ?? 0) + 1);
    this.owned.add(id);
    try {
      await this.node.create(id, g);
      if (g.warmLanguage === 'python') await this.node.call(id, warmUp(g.builtIn)).catch(() => undefined);
      if (this.closed) throw new WarrenError('unavailable', 'this node is shutting down');
      g.workers.push({ id, busy: false, lastUsedMs: Date.now(), tenant });
      g.lastError = null;
    } catch (e) {
      this.owned.delete(id);
      await this.node.destroy(id).catch(() => undefined);
      g.lastError =
        e instanceof WarrenError
          ? new WarrenError(e.code, e.message, { ...e.details, started: false })
          : new WarrenError('internal', 'a FnCall worker failed to start', { started: false }, { cause: e });
      g.retryAtMs = Date.now() + 1000;
      if (!this.closed) this.o.logger?.warn('a FnCall worker failed to start', { image: g.image, error: String(e) });
      // With no worker at all, nothing would ever serve what waits: it fails now.
      if (g.workers.length === 0 && g.creating === 1) for (let w = this.next(g); w; w = this.next(g)) w.reject(g.lastError);
    } finally {
      g.creating--;
      if (tenant !== null) g.creatingFor.set(tenant, (g.creatingFor.get(tenant) ?? 1) - 1);
    }
    this.dispatch(g);
  }

  private retire(g: Group, worker: Worker): void {
    g.workers = g.workers.filter((w) => w !== worker);
    this.owned.delete(worker.id);
    void this.node.destroy(worker.id).catch(() => undefined);
  }

  /** Removes workers idle past idleMs beyond each pool's size; keeps pools at their size. */
  private tick(): void {
    const now = Date.now();
    const idleMs = this.o.idleMs ?? 30_000;
    for (const g of this.groups.values()) {
      for (const w of [...g.workers]) {
        if (g.workers.length <= g.min) break;
        if (!w.busy && now - w.lastUsedMs > idleMs) this.retire(g, w);
      }
      this.grow(g);
    }
  }

  /** The workers per group and the counts since the node started. */
  load(): FnLoad {
    return {
      groups: [...this.groups.values()]
        .filter((g) => g.workers.length || g.creating || g.queues.size)
        .map((g) => ({ key: g.key, image: g.image, workers: g.workers.length, busy: g.workers.filter((w) => w.busy).length, queued: this.waitingIn(g) })),
      ...this.counts,
      tenants: this.tenantsHeld(),
    };
  }

  /** What the workers made for each tenant hold here (tenants holding any; the most first, at most MAX_FN_LOAD_TENANTS). */
  private tenantsHeld(): FnLoad['tenants'] {
    const by = new Map<string, FnHeld & { tenant: string }>();
    for (const g of this.groups.values()) {
      const add = (tenant: string | null, n: number): void => {
        if (tenant === null || n <= 0) return;
        let h = by.get(tenant);
        if (!h) by.set(tenant, (h = { tenant, sandboxes: 0, cpu: 0, memoryMiB: 0 }));
        h.sandboxes += n;
        h.cpu += n * g.resources.cpu;
        h.memoryMiB += n * g.resources.memoryMiB;
      };
      for (const w of g.workers) add(w.tenant, 1);
      for (const [tenant, n] of g.creatingFor) add(tenant, n);
    }
    const all = [...by.values()];
    return all.length > MAX_FN_LOAD_TENANTS ? all.sort((a, b) => b.memoryMiB - a.memoryMiB).slice(0, MAX_FN_LOAD_TENANTS) : all;
  }

  /** Fails what waits and removes every worker (also when the node keeps its sandboxes: workers hold nobody's state). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    const err = new WarrenError('unavailable', 'this node is shutting down', { started: false });
    for (const g of this.groups.values()) for (let w = this.next(g); w; w = this.next(g)) w.reject(err);
    const ids = [...this.owned];
    this.owned.clear();
    for (const g of this.groups.values()) g.workers = [];
    await Promise.all(ids.map((id) => this.node.destroy(id).catch(() => undefined)));
  }
}
