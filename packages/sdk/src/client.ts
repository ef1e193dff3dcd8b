import {
  ROUTES,
  WarrenError,
  type CreateKeyRequest,
  type CreatePoolRequest,
  type FnBatchResponse,
  type FnRunRequest,
  type FnRunResult,
  type Pool,
  type Image,
  type ImageEvent,
  type Info,
  type Layer,
  type ListedImage,
  type ListNodesResponse,
  type LifecycleEvent,
  type SandboxState,
} from '@warren/api';
import type { Body, HttpResponse } from './node-http.js';
import { Sandbox, type CreateOptions } from './sandbox.js';
import { Transport, ndjson, type ClientOptions } from './transport.js';
import { Leases } from './leases.js';
import { lifecycleEvents, type EventsOptions } from './events.js';

export type ImageProgress = Extract<ImageEvent, { type: 'progress' }>;

/** Reads an import or pull's NDJSON to its last line: the image, or the error it reports. */
async function progressResult(res: HttpResponse, onProgress?: (ev: ImageProgress) => void): Promise<Image> {
  for await (const ev of ndjson<ImageEvent>(res)) {
    if (ev.type === 'progress') onProgress?.(ev);
    else if (ev.type === 'done') return ev.image;
    else throw new WarrenError(ev.error.code as never, ev.error.message);
  }
  throw new WarrenError('unavailable', 'the stream ended without a result');
}

export interface ListOptions {
  labels?: Record<string, string>;
  /** Only the sandboxes of this lease. */
  lease?: string;
  /** Only the sandboxes created from this image (or snapshot). */
  image?: string;
  state?: SandboxState;
  limit?: number;
  cursor?: string;
}

/**
 * The Warren client.
 * @example
 * const warren = connect(); // WARREN_URL, WARREN_API_KEY
 * const sb = await warren.sandboxes.create({ image: 'debian-python:latest' });
 * const { stdout } = await sb.exec('python3 -c "print(6*7)"');
 * await sb.delete();
 */
export class Warren {
  readonly sandboxes: Sandboxes;
  readonly pools: Pools;
  readonly fn: Fn;
  /** Leases: sandboxes made with one end once it is no longer renewed. */
  readonly leases: Leases;
  private readonly t: Transport;

  constructor(opts: ClientOptions) {
    this.t = new Transport(opts);
    this.sandboxes = new Sandboxes(this.t);
    this.pools = new Pools(this.t);
    this.fn = new Fn(this.t);
    this.leases = new Leases(this.t);
  }

  /** The images this key sees, each with `usedBy`: the live sandboxes created from it (this tenant's; an admin's key: every tenant's). */
  async images(): Promise<ListedImage[]> {
    return (await this.t.json(ROUTES.listImages)).images;
  }

  /** Imports a `docker save` or OCI image layout tarball (gzip allowed) as image `name`. */
  async importImage(name: string, archive: Body, opts: { onProgress?: (ev: ImageProgress) => void } = {}): Promise<Image> {
    const res = await this.t.request(
      ROUTES.importImage,
      {},
      {
        query: { name },
        body: archive,
        contentType: 'application/x-tar',
        accept: 'application/x-ndjson',
      },
    );
    return progressResult(res, opts.onProgress);
  }

  /** Pulls an image from an OCI registry (`host:port/repo:tag`). */
  async pullImage(
    ref: string,
    opts: { name?: string; auth?: { username: string; password: string }; onProgress?: (ev: ImageProgress) => void } = {},
  ): Promise<Image> {
    const res = await this.t.request(ROUTES.pullImage, {}, { json: { ref, name: opts.name, auth: opts.auth }, accept: 'application/x-ndjson' });
    return progressResult(res, opts.onProgress);
  }

  /**
   * Deletes an image name (admin). Refused (conflict) while live sandboxes were created from it,
   * unless `force`: they keep its layers while they live.
   */
  async deleteImage(name: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.t.empty(ROUTES.deleteImage, { name }, { query: { force: opts.force ? '1' : undefined } });
  }

  /** This tenant's snapshots (Sandbox.snapshot), newest first; `sandbox`: those of one sandbox. */
  async snapshots(q: { sandbox?: string; name?: string } = {}): Promise<ListedImage[]> {
    return (await this.t.json(ROUTES.listSnapshots, {}, { query: q })).snapshots;
  }

  /** Deletes a snapshot; refused (conflict) while live sandboxes were created from it, unless `force`. */
  async deleteSnapshot(name: string, opts: { force?: boolean } = {}): Promise<void> {
    await this.t.empty(ROUTES.deleteSnapshot, { name }, { query: { force: opts.force ? '1' : undefined } });
  }

  /** Uploads a layer tar (gzip allowed; OCI whiteouts honoured) usable in `layers` at create. */
  async uploadLayer(name: string, tar: Body): Promise<Layer> {
    return this.t.json(ROUTES.uploadLayer, {}, { query: { name }, body: tar, contentType: 'application/x-tar' });
  }

  async layers(): Promise<Layer[]> {
    return (await this.t.json(ROUTES.listLayers)).layers;
  }

  /** Copies layers (an image's, or named/digests) to a registry blob store (`oci://host/repo`). */
  async publishLayers(
    to: string,
    what: { image?: string; layers?: string[]; auth?: { username: string; password: string } },
  ): Promise<{ digest: string; sent: boolean }[]> {
    return (await this.t.json(ROUTES.publishLayers, {}, { json: { to, ...what } })).layers;
  }

  async deleteLayer(name: string): Promise<void> {
    await this.t.empty(ROUTES.deleteLayer, { name });
  }

  /** The tenant's lifecycle events as they happen (see lifecycleEvents): `for await (const ev of warren.events())`. */
  events(o: EventsOptions = {}): AsyncGenerator<LifecycleEvent> {
    return lifecycleEvents(this.t, o);
  }

  info(): Promise<Info> {
    return this.t.json(ROUTES.info);
  }

  /** The nodes: capacity, what their sandboxes requested, what admission counts, what they use. */
  nodes(): Promise<ListNodesResponse> {
    return this.t.json(ROUTES.listNodes);
  }

  /** Creates an API key for a tenant (admin keys only); the key is shown once. */
  async createKey(req: CreateKeyRequest): Promise<string> {
    return (await this.t.json(ROUTES.createKey, {}, { json: req })).key;
  }

  /** Revokes an API key by its keyId (admin keys only): it stops working at once. */
  async revokeKey(keyId: string): Promise<void> {
    await this.t.empty(ROUTES.deleteKey, { keyId });
  }
}

/**
 * FnCall: short stateless calls (python, bash, node) in warm workers; nothing of one call is
 * seen by the next. `run` answers one call; `batch` many, in order, an error per failed call.
 */
export class Fn {
  constructor(private readonly t: Transport) {}

  async run(req: FnRunRequest): Promise<FnRunResult> {
    return this.t.json(ROUTES.fnRun, {}, { json: req });
  }

  async batch(calls: FnRunRequest[]): Promise<FnBatchResponse['results']> {
    return (await this.t.json(ROUTES.fnBatch, {}, { json: { calls } })).results;
  }
}

/** Warm pools: sandboxes of one spec kept ready; matching creates claim them. */
export class Pools {
  constructor(private readonly t: Transport) {}

  create(req: CreatePoolRequest): Promise<Pool> {
    return this.t.json(ROUTES.createPool, {}, { json: req });
  }

  async list(): Promise<Pool[]> {
    return (await this.t.json(ROUTES.listPools)).pools;
  }

  async delete(id: string): Promise<void> {
    await this.t.empty(ROUTES.deletePool, { id });
  }
}

export class Sandboxes {
  constructor(private readonly t: Transport) {}

  async create(opts: CreateOptions): Promise<Sandbox> {
    return new Sandbox(this.t, await this.t.json(ROUTES.createSandbox, {}, { json: opts }));
  }

  /** Creates `count` sandboxes from one template; failures are returned, not thrown. */
  async createMany(count: number, template: CreateOptions): Promise<{ sandboxes: Sandbox[]; errors: Array<{ code: string; message: string }> }> {
    const r = await this.t.json(ROUTES.batchCreate, {}, { json: { count, template } });
    return { sandboxes: r.sandboxes.map((s) => new Sandbox(this.t, s)), errors: r.errors };
  }

  /** Reconnects to a sandbox by id (from any process). */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.t, await this.t.json(ROUTES.getSandbox, { id }));
  }

  async list(opts: ListOptions = {}): Promise<{ sandboxes: Sandbox[]; nextCursor: string | null }> {
    const label = Object.entries(opts.labels ?? {}).map(([k, v]) => `${k}=${v}`);
    const r = await this.t.json(
      ROUTES.listSandboxes,
      {},
      { query: { label, state: opts.state, lease: opts.lease, image: opts.image, limit: opts.limit, cursor: opts.cursor } },
    );
    return { sandboxes: r.sandboxes.map((s) => new Sandbox(this.t, s)), nextCursor: r.nextCursor };
  }

  /** Pauses, resumes or deletes every sandbox with all these labels; returns how many. */
  async batch(op: 'pause' | 'resume' | 'delete', labels: Record<string, string>): Promise<number> {
    return (await this.t.json(op === 'pause' ? ROUTES.batchPause : op === 'resume' ? ROUTES.batchResume : ROUTES.batchDelete, {}, { json: { labels } })).count;
  }
}

/** A client from explicit options, falling back to WARREN_URL and WARREN_API_KEY. */
export function connect(opts: Partial<ClientOptions> = {}, env: Record<string, string | undefined> = process.env): Warren {
  const url = opts.url ?? env.WARREN_URL ?? 'http://127.0.0.1:7070';
  const apiKey = opts.apiKey ?? env.WARREN_API_KEY ?? '';
  return new Warren({ ...opts, url, apiKey });
}
