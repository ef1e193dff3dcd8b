import { cpus } from 'node:os';
import { isAbsolute, posix } from 'node:path';
import { DEFAULT_PATH, WarrenError, type FnRunRequest, type FnRunResult, type Image } from '@warren/api';
import type { EdgeApi, EdgeCapacity, EdgeSandboxSpec, FnCallSpec } from '@warren/edge';
import type { ImageCatalogue } from '@warren/images';
import type { TenantUsage } from '../store/store.js';
import { newSandboxId } from './ids.js';
import { hasQuota, unclaimedSpec, visibleImage, type Caller } from './sandboxes.js';

export interface FnOptions {
  /** The image of calls that name none (default debian-python:latest). */
  defaultImage?: string;
  /** Workers kept warm from the start, per image (default resources); python also starts its zygote. */
  pools?: Array<{ image: string; language?: FnRunRequest['language']; size: number }>;
  /** The most workers of one image (default twice the CPUs, at least 4). */
  maxWorkersPerImage?: number;
  /** Calls one tenant may have waiting, all images together (default 10 000). */
  queueLimit?: number;
  /** What each worker, and so each call, may use unless the call asks (default 1 CPU, 512 MiB, 256 pids). */
  resources?: { cpu: number; memoryMiB: number; pids: number };
  /** Workers beyond a pool's size are removed after this long without a call (default 30 s). */
  idleMs?: number;
  /**
   * Tenants' quotas: `usage` reads what a tenant's sandboxes hold from the store (once per call
   * enqueued, and only for a key with a quota); `fit` says whether one more worker of these
   * resources fits beside that, its pools and the workers made for it (resource_exhausted if not).
   */
  quota?: {
    usage(tenant: string): Promise<TenantUsage>;
    fit(tenant: string, quota: Caller['quota'], resources: { cpu: number; memoryMiB: number }, stored: TenantUsage): void;
  };
  logger: { warn(msg: string, meta?: unknown): void };
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
  quota: Caller['quota'];
  /** What the tenant's sandboxes held by the store when the call came (none: its key has no quota). */
  stored: TenantUsage | null;
  spec: FnCallSpec;
  enqueuedMs: number;
  resolve: (r: FnRunResult) => void;
  reject: (e: unknown) => void;
  retried: boolean;
}

/** The workers of one image and one size, and the calls waiting for them, per tenant. */
interface Group {
  image: string;
  layers: string[];
  resources: { cpu: number; memoryMiB: number; pids: number };
  workers: Worker[];
  creating: number;
  /** Workers being made, by the tenant they are made for. */
  creatingFor: Map<string, number>;
  /** Kept at least this many (the configured pool). */
  min: number;
  warmLanguage: FnRunRequest['language'] | null;
  /** Whether the image that made the group is one Warren built (see callSpec on the zygote). */
  builtIn: boolean;
  queues: Map<string, Waiting[]>;
  /** Tenants with waiting calls, in the order they are served (round robin). */
  turn: string[];
  lastError: WarrenError | null;
  retryAtMs: number;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_OUTPUT = 1024 * 1024;
/** The output a batch's results may hold together while the batch runs. */
const MAX_BATCH_OUTPUT = 256 * 1024 * 1024;
const BASE_ENV = { PATH: DEFAULT_PATH, HOME: '/root', LANG: 'C.UTF-8' };
/** PYTHON* variables images set for their own builds, which the interpreter does not read. */
const IMAGE_BUILD_VARS = /^PYTHON_(VERSION|SHA256|GET_PIP_URL|GET_PIP_SHA256|PIP_VERSION|SETUPTOOLS_VERSION)$/;

/**
 * FnCall: short stateless calls in warm, reused workers. A worker is a container sandbox whose
 * init gives each call new namespaces and a fresh writable layer (native/fn.c), so a call never
 * pays for a sandbox and never sees another's leftovers. Each worker runs one call at a time (its
 * cgroup is the call's CPU, memory and pids limit); calls wait in per-tenant queues served round
 * robin, and an image gets more workers while calls wait, up to a limit.
 */
export class FnService {
  private readonly groups = new Map<string, Group>();
  private readonly queued = new Map<string, number>();
  private readonly owned = new Set<string>();
  private readonly maxWorkers: number;
  private readonly queueLimit: number;
  private readonly resources: { cpu: number; memoryMiB: number; pids: number };
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly counts = { calls: 0, timedOut: 0, failed: 0, rejected: 0 };

  constructor(
    private readonly edge: EdgeApi,
    /** What the node allows one sandbox (a worker's size is checked against it). */
    private readonly capacity: EdgeCapacity,
    private readonly catalogue: ImageCatalogue,
    private readonly o: FnOptions,
  ) {
    this.maxWorkers = o.maxWorkersPerImage ?? Math.max(4, 2 * cpus().length);
    this.queueLimit = o.queueLimit ?? 10_000;
    this.resources = o.resources ?? { cpu: 1, memoryMiB: 512, pids: 256 };
  }

  /** Starts the configured pools and the removal of idle workers. */
  async start(): Promise<void> {
    for (const p of this.o.pools ?? []) {
      const g = this.group(await this.image(null, p.image), p.image);
      g.min = Math.max(g.min, p.size);
      g.warmLanguage ??= p.language ?? null;
    }
    this.timer = setInterval(() => this.tick(), 1000);
    this.timer.unref();
    this.tick();
  }

  /** Whether a sandbox id is one of the FnCall workers. */
  owns(id: string): boolean {
    return this.owned.has(id);
  }

  /** The edge saw a worker die: it is forgotten (and replaced when calls need one). */
  died(id: string): void {
    for (const g of this.groups.values()) g.workers = g.workers.filter((w) => w.id !== id);
    this.owned.delete(id);
    void this.edge.destroy(id).catch(() => undefined);
  }

  async run(caller: Caller, req: FnRunRequest): Promise<FnRunResult> {
    return (await this.enqueue(caller, [req]))[0]!;
  }

  /**
   * Runs calls, all or none admitted; each settles on its own (an error for one is its result).
   * Their results are held until the last one ends: the output they may keep together is
   * bounded (MAX_BATCH_OUTPUT), or the batch is refused with payload_too_large.
   */
  async batch(caller: Caller, reqs: FnRunRequest[]): Promise<Array<FnRunResult | { error: { code: string; message: string } }>> {
    const outputBytes = reqs.reduce((n, r) => n + (r.maxOutputBytes ?? DEFAULT_MAX_OUTPUT), 0);
    if (outputBytes > MAX_BATCH_OUTPUT)
      throw new WarrenError(
        'payload_too_large',
        `a batch's calls may keep ${MAX_BATCH_OUTPUT} bytes of output together (maxOutputBytes, default ${DEFAULT_MAX_OUTPUT} each); these ask for ${outputBytes}`,
        { maxBatchOutputBytes: MAX_BATCH_OUTPUT, requested: outputBytes },
      );
    const settled = await Promise.allSettled(await this.enqueue(caller, reqs));
    return settled.map((s) => {
      if (s.status === 'fulfilled') return s.value;
      const e = s.reason instanceof WarrenError ? s.reason : new WarrenError('internal', 'internal error');
      return { error: { code: e.code, message: e.message } };
    });
  }

  private async enqueue(caller: Caller, reqs: FnRunRequest[]): Promise<Array<Promise<FnRunResult>>> {
    if (this.closed) throw new WarrenError('unavailable', 'this node is shutting down');
    // Everything is checked before anything waits: a bad call rejects the whole request.
    const names = reqs.map((req) => req.image ?? this.o.defaultImage ?? 'debian-python:latest');
    const images = new Map<string, Image>();
    for (const name of names) if (!images.has(name)) images.set(name, await this.image(caller, name));
    // No await from here to the queueing: groups are found or made once.
    const prepared = reqs.map((req, i) => {
      const img = images.get(names[i]!)!;
      return { g: this.group(img, names[i]!, req.resources), spec: callSpec(req, img) };
    });
    // The last wait: the checks and the queueing that follow it do not await.
    const stored = this.o.quota && hasQuota(caller.quota) ? await this.o.quota.usage(caller.tenant) : null;
    if (this.closed) throw new WarrenError('unavailable', 'this node is shutting down');
    const waiting = this.queued.get(caller.tenant) ?? 0;
    if (waiting + reqs.length > this.queueLimit) {
      this.counts.rejected += reqs.length;
      throw new WarrenError('resource_exhausted', `this tenant has ${waiting} calls waiting; at most ${this.queueLimit} may wait`, {
        queued: waiting,
        queueLimit: this.queueLimit,
      });
    }
    const now = Date.now();
    const promises = prepared.map(
      ({ g, spec }) =>
        new Promise<FnRunResult>((resolve, reject) => {
          const w: Waiting = { tenant: caller.tenant, quota: caller.quota, stored, spec, enqueuedMs: now, resolve, reject, retried: false };
          this.push(g, w);
        }),
    );
    for (const g of new Set(prepared.map((p) => p.g))) {
      g.warmLanguage ??= prepared.find((p) => p.g === g)!.spec.language;
      this.dispatch(g);
      this.grow(g);
    }
    return promises;
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

  /** An image `caller` may use (null: the node's own pools, any image). */
  private async image(caller: Caller | null, image: string): Promise<Image> {
    const img = caller ? await visibleImage(this.catalogue, caller, image) : await this.catalogue.getImage(image);
    if (!img) throw new WarrenError('not_found', `image "${image}" does not exist`, { image });
    return img;
  }

  private group(img: Image, image: string, asked: FnRunRequest['resources'] = {}): Group {
    const resources = { cpu: asked.cpu ?? this.resources.cpu, memoryMiB: asked.memoryMiB ?? this.resources.memoryMiB, pids: asked.pids ?? this.resources.pids };
    const cap = this.capacity;
    if (resources.cpu > cap.maxCpuPerSandbox || resources.memoryMiB > cap.maxMemoryMiBPerSandbox) {
      throw new WarrenError('invalid_argument', `a call on this node may have at most ${cap.maxCpuPerSandbox} CPUs and ${cap.maxMemoryMiBPerSandbox} MiB`, {
        resources,
      });
    }
    const key = `${img.layers.join(',')}|${resources.cpu}|${resources.memoryMiB}|${resources.pids}`;
    let g = this.groups.get(key);
    if (!g) {
      g = {
        image,
        layers: img.layers,
        resources,
        workers: [],
        creating: 0,
        creatingFor: new Map(),
        min: 0,
        warmLanguage: null,
        builtIn: img.builtIn,
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
      const out = await this.edge.fnCall(worker.id, w.spec);
      const end = Date.now();
      this.counts.calls++;
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
      });
    } catch (e) {
      if (e instanceof WarrenError && (e.code === 'unavailable' || e.code === 'not_found' || e.code === 'internal')) {
        // The worker is gone or broken, not the call: a new worker takes it (once).
        this.o.logger.warn('a FnCall worker failed a call; it is replaced', { worker: worker.id, error: e.message, retried: w.retried });
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
   * More workers while calls wait and the image may have more: the pool's first (no tenant's),
   * then one for each waiting call, made for the tenants whose calls wait, in turn, each within
   * its quota (a worker counts there as a sandbox of its size while it lives). A tenant past its
   * quota waits for the workers there are; with none at all, its calls fail.
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
        try {
          const first = q[0]!;
          if (first.stored) this.o.quota?.fit(tenant, first.quota, g.resources, first.stored);
        } catch (e) {
          refused.set(tenant, e instanceof WarrenError ? e : new WarrenError('resource_exhausted', `tenant "${tenant}" is over its quota`));
          continue;
        }
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

  /** What the workers made for a tenant hold (they count in its quota). */
  held(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } {
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
    const id = newSandboxId();
    g.creating++;
    if (tenant !== null) g.creatingFor.set(tenant, (g.creatingFor.get(tenant) ?? 0) + 1);
    this.owned.add(id);
    try {
      await this.edge.create(this.workerSpec(g, id));
      if (g.warmLanguage === 'python') {
        // The zygote starts with the first Python call: this one, not a caller's.
        await this.edge
          .fnCall(id, { ...callSpec({ language: 'python', code: 'pass' }, { env: {}, builtIn: g.builtIn }), timeoutMs: 30_000 })
          .catch(() => undefined);
      }
      if (this.closed) throw new WarrenError('unavailable', 'this node is shutting down');
      g.workers.push({ id, busy: false, lastUsedMs: Date.now(), tenant });
      g.lastError = null;
    } catch (e) {
      this.owned.delete(id);
      await this.edge.destroy(id).catch(() => undefined);
      g.lastError = e instanceof WarrenError ? e : new WarrenError('internal', 'a FnCall worker failed to start', {}, { cause: e });
      g.retryAtMs = Date.now() + 1000;
      if (!this.closed) this.o.logger.warn('a FnCall worker failed to start', { image: g.image, error: String(e) });
      // With no worker at all, nothing would ever serve what waits: it fails now.
      if (g.workers.length === 0 && g.creating === 1) for (let w = this.next(g); w; w = this.next(g)) w.reject(g.lastError);
    } finally {
      g.creating--;
      if (tenant !== null) g.creatingFor.set(tenant, (g.creatingFor.get(tenant) ?? 1) - 1);
    }
    this.dispatch(g);
  }

  private workerSpec(g: Group, id: string): EdgeSandboxSpec {
    return unclaimedSpec(id, g.layers, g.resources, { fn: true });
  }

  private retire(g: Group, worker: Worker): void {
    g.workers = g.workers.filter((w) => w !== worker);
    this.owned.delete(worker.id);
    void this.edge.destroy(worker.id).catch(() => undefined);
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

  /** Workers per image (for /v1/nodes and tests). */
  stats(): Array<{ image: string; workers: number; busy: number; queued: number }> {
    return [...this.groups.values()].map((g) => ({
      image: g.image,
      workers: g.workers.length,
      busy: g.workers.filter((w) => w.busy).length,
      queued: this.waitingIn(g),
    }));
  }

  /** Prometheus lines. */
  metrics(): string {
    let workers = 0;
    let busy = 0;
    let queued = 0;
    for (const s of this.stats()) {
      workers += s.workers;
      busy += s.busy;
      queued += s.queued;
    }
    return (
      `# TYPE warren_fn_calls_total counter\nwarren_fn_calls_total ${this.counts.calls}\n` +
      `# TYPE warren_fn_calls_timed_out_total counter\nwarren_fn_calls_timed_out_total ${this.counts.timedOut}\n` +
      `# TYPE warren_fn_calls_failed_total counter\nwarren_fn_calls_failed_total ${this.counts.failed}\n` +
      `# TYPE warren_fn_calls_rejected_total counter\nwarren_fn_calls_rejected_total ${this.counts.rejected}\n` +
      `# TYPE warren_fn_workers gauge\nwarren_fn_workers ${workers}\n# TYPE warren_fn_workers_busy gauge\nwarren_fn_workers_busy ${busy}\n` +
      `# TYPE warren_fn_queued gauge\nwarren_fn_queued ${queued}\n`
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    const err = new WarrenError('unavailable', 'this node is shutting down');
    for (const g of this.groups.values()) for (let w = this.next(g); w; w = this.next(g)) w.reject(err);
    const ids = [...this.owned];
    this.owned.clear();
    for (const g of this.groups.values()) g.workers = [];
    await Promise.all(ids.map((id) => this.edge.destroy(id).catch(() => undefined)));
  }
}

/**
 * A request as the worker runs it: defaults applied, files resolved against cwd, the environment
 * as in a sandbox of the image (the base, the image's own, then the call's). Python calls fork
 * from the worker's zygote only for an image Warren built itself (a default one): the zygote
 * starts the image's python3 and imports its modules while the worker still holds CAP_SYS_ADMIN
 * (it makes each call's namespaces), so any other image, whose python3 may be anything, has each
 * call exec'd after the privilege is dropped instead (`image` absent: so).
 */
export function callSpec(req: FnRunRequest, image: { env: Record<string, string>; builtIn: boolean } = { env: {}, builtIn: false }): FnCallSpec {
  const imageEnv = image.env;
  const cwd = req.cwd ?? '/tmp';
  const files = (req.files ?? []).map((f) => {
    const path = posix.normalize(isAbsolute(f.path) ? f.path : posix.join(cwd, f.path));
    if (path.includes('\0') || path === '/' || /^\/(proc|sys|dev)(\/|$)/.test(path))
      throw new WarrenError('invalid_argument', `file path "${f.path}" is not allowed`, { path: f.path });
    return { path, content: Buffer.from(f.content, f.encoding === 'base64' ? 'base64' : 'utf8') };
  });
  return {
    language: req.language,
    code: req.code,
    stdin: req.stdin === undefined ? undefined : Buffer.from(req.stdin),
    env: Object.entries({ ...BASE_ENV, ...imageEnv, ...req.env }).map(([k, v]) => `${k}=${v}`),
    cwd,
    timeoutMs: req.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    files,
    maxOutputBytes: req.maxOutputBytes ?? DEFAULT_MAX_OUTPUT,
    // The zygote's interpreter started in a fixed environment: one that must read PYTHON* starts afresh.
    zygote: image.builtIn && ![...Object.keys(imageEnv), ...Object.keys(req.env ?? {})].some((k) => k.startsWith('PYTHON') && !IMAGE_BUILD_VARS.test(k)),
  };
}
