import { isAbsolute, posix } from 'node:path';
import { DEFAULTS, DEFAULT_PATH, WarrenError, type CpuClass, type FnRunRequest, type FnRunResult, type Image } from '@warren/api';
import { fnGroupKey, type EdgeFnResult, type FnCallSpec, type FnGroupSpec, type FnLoad, type FnRoom } from '@warren/edge';
import type { ImageCatalogue } from '@warren/images';
import type { Cluster, ClusterNode } from '../cluster/cluster.js';
import { hasQuota, visibleImage, type Caller } from './sandboxes.js';
import { pickFnNode } from '../placement/fn-route.js';
import { cpuClassFor } from './create-resolve.js';

export interface FnOptions {
  /** The image of calls that name none (default debian-python:latest). */
  defaultImage?: string;
  /** Workers kept warm on every node, per image (default resources); python also starts its zygote. */
  pools?: Array<{ image: string; language?: FnRunRequest['language']; size: number }>;
  /** The most workers of one image on a node (default twice its CPUs, at least 4): the node's. */
  maxWorkersPerImage?: number;
  /** Calls one tenant may have waiting on a node, all images together (default 10 000): the node's. */
  queueLimit?: number;
  /** What each worker, and so each call, may use unless the call asks (default 1 CPU, 512 MiB, 256 pids). */
  resources?: { cpu: number; memoryMiB: number; pids: number };
  /** Workers beyond a pool's size are removed after this long without a call (default 30 s): the node's. */
  idleMs?: number;
  /**
   * Tenants' quotas: what a tenant holds besides FnCall workers (its sandboxes by the store and
   * its warm pools), read once per call for a key with a quota only.
   */
  quota?: { usage(tenant: string): Promise<Held> };
  logger: { warn(msg: string, meta?: unknown): void };
}

type Held = { sandboxes: number; cpu: number; memoryMiB: number };
const NONE: Held = { sandboxes: 0, cpu: 0, memoryMiB: 0 };

const DEFAULT_TIMEOUT_MS = DEFAULTS.fn.timeoutMs;
const DEFAULT_MAX_OUTPUT = DEFAULTS.fn.maxOutputBytes;
/** The output a batch's results may hold together while the batch runs. */
const MAX_BATCH_OUTPUT = 256 * 1024 * 1024;
const BASE_ENV = { PATH: DEFAULT_PATH, HOME: '/root', LANG: 'C.UTF-8' };
/** PYTHON* variables images set for their own builds, which the interpreter does not read. */
const IMAGE_BUILD_VARS = /^PYTHON_(VERSION|SHA256|GET_PIP_URL|GET_PIP_SHA256|PIP_VERSION|SETUPTOOLS_VERSION)$/;

/**
 * FnCall across the nodes: short stateless calls in warm, reused workers that each node owns
 * (edge/src/fn/fn-workers.ts: it makes them under its own admission, queues calls per tenant
 * and recycles them). This side checks a call, resolves its image, and sends it to a node that
 * has a free warm worker of its image and size, else to the node with the least of it waiting;
 * a call a node never started (details.started false) is tried once on another node.
 */
export class FnService {
  /** Calls this replica has sent to each node and not had answered, per group. */
  private readonly inFlight = new Map<string, Map<string, number>>();
  /**
   * What the workers made for each tenant hold, per node, as the node's last answer to this
   * replica said, and when (on the node's load clock). A heartbeat read later is truer: it also
   * counts the workers made for calls another replica sent, and those retired since.
   */
  private readonly answered = new Map<string, Map<string, { held: Held; at: number }>>();
  /** Each load's tenants by name (a load is read by every call while it is the node's latest). */
  private readonly tenantsOf = new WeakMap<FnLoad, Map<string, Held>>();
  /** The boots of the nodes the configured pools were sent to. */
  private readonly warmed = new Set<string>();
  private readonly resources: { cpu: number; memoryMiB: number; pids: number };
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly counts = { retried: 0 };

  constructor(
    private readonly cluster: Pick<Cluster, 'up' | 'loadOf'>,
    private readonly catalogue: ImageCatalogue,
    private readonly o: FnOptions,
  ) {
    this.resources = o.resources ?? { ...DEFAULTS.fn.resources };
  }

  /** Sends the configured pools to every node, now and to each node that joins or restarts. */
  async start(): Promise<void> {
    await this.warmNodes();
    this.timer = setInterval(() => void this.warmNodes(), 1000);
    this.timer.unref();
  }

  /** Keeps pools a node asked for itself (`warren edge --fn-pool`) warm on it. */
  async warmNode(node: string, pools: NonNullable<FnOptions['pools']>): Promise<void> {
    const n = this.cluster.up().find((x) => x.id === node);
    if (!n) return;
    for (const p of pools) {
      try {
        const img = await this.image(null, p.image);
        await n.api.fnWarm(this.groupSpec(img, p.image, {}, n), p.size, p.language ?? null);
      } catch (e) {
        this.o.logger.warn('a FnCall pool a node asked for could not be kept', { node, image: p.image, error: String(e) });
      }
    }
  }

  private async warmNodes(): Promise<void> {
    const pools = this.o.pools ?? [];
    if (!pools.length || this.closed) return;
    for (const n of this.fnNodes()) {
      if (this.warmed.has(n.boot)) continue;
      this.warmed.add(n.boot);
      for (const p of pools) {
        try {
          const img = await this.image(null, p.image);
          await n.api.fnWarm(this.groupSpec(img, p.image, {}, n), p.size, p.language ?? null);
        } catch (e) {
          this.o.logger.warn('a FnCall pool could not be kept on a node', { node: n.id, image: p.image, error: String(e) });
        }
      }
    }
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
    // Bulk calls run on batch workers: on what the node's latency work leaves idle.
    const settled = await Promise.allSettled(await this.enqueue(caller, reqs, 'batch'));
    return settled.map((s) => {
      if (s.status === 'fulfilled') return s.value;
      const e = s.reason instanceof WarrenError ? s.reason : new WarrenError('internal', 'internal error');
      return { error: { code: e.code, message: e.message } };
    });
  }

  /** The nodes that may run FnCall workers (containers), not down or draining. */
  private fnNodes(): ClusterNode[] {
    return this.cluster.up().filter((n) => n.state === 'ready' && n.info.backends.some((b) => b.name === 'container'));
  }

  private async enqueue(caller: Caller, reqs: FnRunRequest[], asked?: CpuClass): Promise<Array<Promise<FnRunResult>>> {
    if (this.closed) throw new WarrenError('unavailable', 'this node is shutting down');
    // A request of more calls than may wait is refused whole; past that each node bounds what waits on it.
    const limit = this.o.queueLimit ?? 10_000;
    if (reqs.length > limit)
      throw new WarrenError('resource_exhausted', `a request may have at most ${limit} calls waiting; this one has ${reqs.length}`, { queueLimit: limit });
    const nodes = this.fnNodes();
    if (!nodes.length) throw new WarrenError('unavailable', 'no node runs FnCall workers now (none is up with the container backend)');
    // Everything is checked before anything is sent: a bad call rejects the whole request.
    const names = reqs.map((req) => req.image ?? this.o.defaultImage ?? DEFAULTS.fn.image);
    const images = new Map<string, Image>();
    for (const name of names) if (!images.has(name)) images.set(name, await this.image(caller, name));
    const cpuClass = cpuClassFor(caller, asked);
    const prepared = reqs.map((req, i) => {
      const img = images.get(names[i]!)!;
      return { group: this.groupSpec(img, names[i]!, req.resources, null, cpuClass), spec: callSpec(req, img) };
    });
    const usage = this.o.quota && hasQuota(caller.quota) ? await this.o.quota.usage(caller.tenant) : null;
    return prepared.map(({ group, spec }) => this.send(caller, usage, group, spec));
  }

  /** One call to a node, and once more to another if the first never started it. */
  private async send(caller: Caller, usage: Held | null, group: FnGroupSpec, spec: FnCallSpec): Promise<FnRunResult> {
    const key = fnGroupKey(group);
    const tried = new Set<string>();
    for (;;) {
      const node = pickFnNode(this.fnNodes(), key, group.resources, this.inFlight, tried);
      if (!node) throw new WarrenError('unavailable', 'no node can take the call now', { started: false });
      tried.add(node.id);
      const room = usage ? this.room(caller, usage, node.id) : null;
      this.count(node.id, key, 1);
      let r: EdgeFnResult;
      try {
        r = await node.api.fnRun({ tenant: caller.tenant, room, group, spec });
      } catch (e) {
        // Never reached a worker there (the node unreachable, or full: no worker could start): another node may take it.
        const never = e instanceof WarrenError && e.details.started === false;
        if (never && tried.size < 2 && !this.closed) {
          this.counts.retried++;
          continue;
        }
        throw e;
      } finally {
        this.count(node.id, key, -1);
      }
      this.hold(caller.tenant, node.id, r.held, r.heldAt);
      return {
        stdout: r.stdout,
        stderr: r.stderr,
        exitCode: r.exitCode,
        signal: r.signal,
        durationMs: r.durationMs,
        queuedMs: r.queuedMs,
        timedOut: r.timedOut,
        truncated: r.truncated,
        killedBy: r.timedOut ? 'timeout' : null,
      };
    }
  }

  private count(node: string, key: string, d: 1 | -1): void {
    let m = this.inFlight.get(node);
    if (!m) this.inFlight.set(node, (m = new Map<string, number>()));
    const n = (m.get(key) ?? 0) + d;
    if (n > 0) m.set(key, n);
    else m.delete(key);
  }

  private hold(tenant: string, node: string, held: Held, at: number): void {
    let m = this.answered.get(tenant);
    if (!m) this.answered.set(tenant, (m = new Map<string, { held: Held; at: number }>()));
    m.set(node, { held, at });
  }

  /** What the workers made for a tenant hold on node `n`: the later of this replica's last answer from it and its load. */
  private heldOn(tenant: string, n: ClusterNode): Held {
    const m = this.answered.get(tenant);
    const a = m?.get(n.id);
    const f = n.load.fn;
    if (a && (!f || a.at >= n.load.at)) return a.held;
    // The load is the later: the answer is of no more use.
    if (a) {
      m!.delete(n.id);
      if (!m!.size) this.answered.delete(tenant);
    }
    if (!f?.tenants?.length) return NONE;
    let by = this.tenantsOf.get(f);
    if (!by) this.tenantsOf.set(f, (by = new Map(f.tenants.map((t) => [t.tenant, t]))));
    return by.get(tenant) ?? NONE;
  }

  /** What the workers made for a tenant hold on the nodes that are up, `except` one. */
  private heldExcept(tenant: string, except: string | null): Held {
    const out = { ...NONE };
    for (const n of this.cluster.up()) {
      if (n.id === except) continue;
      const h = this.heldOn(tenant, n);
      out.sandboxes += h.sandboxes;
      out.cpu += h.cpu;
      out.memoryMiB += h.memoryMiB;
    }
    return out;
  }

  /** What a tenant's quota leaves for workers made for it on `node`: its quota less its sandboxes, pools and workers elsewhere. */
  private room(caller: Caller, usage: Held, node: string): FnRoom {
    const q = caller.quota;
    const h = this.heldExcept(caller.tenant, node);
    return {
      ...(q.sandboxes !== undefined ? { sandboxes: q.sandboxes - usage.sandboxes - h.sandboxes } : {}),
      ...(q.cpu !== undefined ? { cpu: q.cpu - usage.cpu - h.cpu } : {}),
      ...(q.memoryMiB !== undefined ? { memoryMiB: q.memoryMiB - usage.memoryMiB - h.memoryMiB } : {}),
    };
  }

  /**
   * What the workers made for a tenant hold on every node that is up (they count in its quota),
   * also those made for calls another replica sent: by each node's last answer or heartbeat.
   */
  held(tenant: string): Held {
    return this.heldExcept(tenant, null);
  }

  /** An image `caller` may use (null: the configured pools, any image). */
  private async image(caller: Caller | null, image: string): Promise<Image> {
    const img = caller ? await visibleImage(this.catalogue, caller, image) : await this.catalogue.getImage(image);
    if (!img) throw new WarrenError('not_found', `image "${image}" does not exist`, { image });
    return img;
  }

  /** A call's group: its image's layers and its size, checked against what the nodes (or `on`) allow one sandbox. */
  private groupSpec(img: Image, image: string, asked: FnRunRequest['resources'] = {}, on: ClusterNode | null, cpuClass: CpuClass = 'latency'): FnGroupSpec {
    const resources = { cpu: asked.cpu ?? this.resources.cpu, memoryMiB: asked.memoryMiB ?? this.resources.memoryMiB, pids: asked.pids ?? this.resources.pids };
    const caps = (on ? [on] : this.fnNodes()).map((n) => n.info.capacity);
    const cpu = Math.max(0, ...caps.map((c) => c.maxCpuPerSandbox));
    const mem = Math.max(0, ...caps.map((c) => c.maxMemoryMiBPerSandbox));
    if (resources.cpu > cpu || resources.memoryMiB > mem)
      throw new WarrenError('invalid_argument', `a call may have at most ${cpu} CPUs and ${mem} MiB (the largest a node allows one sandbox)`, { resources });
    return { image, layers: img.layers, builtIn: img.builtIn, resources: cpuClass === 'batch' ? { ...resources, cpuClass } : resources };
  }

  /** Prometheus lines: the nodes' workers and calls (their loads), and this replica's retries. */
  async metrics(): Promise<string> {
    const loads = await Promise.all(this.fnNodes().map(async (n) => [n.id, (await this.cluster.loadOf(n)).fn] as const));
    const sum = { workers: 0, busy: 0, queued: 0, calls: 0, timedOut: 0, failed: 0, rejected: 0, coldStarts: 0, queuedMs: 0 };
    const per: string[] = [];
    for (const [id, f] of loads) {
      if (!f) continue;
      const w = fnGauges(f);
      sum.workers += w.workers;
      sum.busy += w.busy;
      sum.queued += w.queued;
      sum.calls += f.calls;
      sum.timedOut += f.timedOut;
      sum.failed += f.failed;
      sum.rejected += f.rejected;
      sum.coldStarts += f.coldStarts;
      sum.queuedMs += f.queuedMs;
      per.push(
        `warren_node_fn_calls_total{node="${id}"} ${f.calls}`,
        `warren_node_fn_cold_starts_total{node="${id}"} ${f.coldStarts}`,
        `warren_node_fn_queued_ms_total{node="${id}"} ${f.queuedMs}`,
        `warren_node_fn_workers{node="${id}"} ${w.workers}`,
        `warren_node_fn_queued{node="${id}"} ${w.queued}`,
      );
    }
    return (
      `# TYPE warren_fn_calls_total counter\nwarren_fn_calls_total ${sum.calls}\n` +
      `# TYPE warren_fn_calls_timed_out_total counter\nwarren_fn_calls_timed_out_total ${sum.timedOut}\n` +
      `# TYPE warren_fn_calls_failed_total counter\nwarren_fn_calls_failed_total ${sum.failed}\n` +
      `# TYPE warren_fn_calls_rejected_total counter\nwarren_fn_calls_rejected_total ${sum.rejected}\n` +
      `# TYPE warren_fn_cold_starts_total counter\nwarren_fn_cold_starts_total ${sum.coldStarts}\n` +
      `# TYPE warren_fn_retried_total counter\nwarren_fn_retried_total ${this.counts.retried}\n` +
      `# TYPE warren_fn_workers gauge\nwarren_fn_workers ${sum.workers}\n# TYPE warren_fn_workers_busy gauge\nwarren_fn_workers_busy ${sum.busy}\n` +
      `# TYPE warren_fn_queued gauge\nwarren_fn_queued ${sum.queued}\n` +
      `# TYPE warren_node_fn_calls_total counter\n# TYPE warren_node_fn_cold_starts_total counter\n# TYPE warren_node_fn_queued_ms_total counter\n` +
      `# TYPE warren_node_fn_workers gauge\n# TYPE warren_node_fn_queued gauge\n${per.join('\n')}\n`
    );
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
  }
}

/** A node's workers, busy ones and waiting calls, all groups together. */
export function fnGauges(f: FnLoad): { workers: number; busy: number; queued: number } {
  const out = { workers: 0, busy: 0, queued: 0 };
  for (const g of f.groups) {
    out.workers += g.workers;
    out.busy += g.busy;
    out.queued += g.queued;
  }
  return out;
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
  const cwd = req.cwd ?? DEFAULTS.fn.cwd;
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
