import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable, Transform } from 'node:stream';
import { WarrenError, type CommitRequest, type Image, type ImageEvent, type Layer, type PublishLayersRequest, type PublishLayersResponse } from '@warren/api';
import { forkBaseOf, type EdgeApi } from '@warren/edge';
import {
  gunzipIfCompressed,
  importArchive,
  layerDigest,
  parseImageRef,
  parseOciStoreUrl,
  publishLayers,
  pullImage,
  type FsOps,
  type IdMap,
  type ImageCatalogue,
  type RegistryCredentials,
} from '@warren/images';

export interface ImageServiceOptions {
  idMap: IdMap;
  ops: FsOps;
  /** Largest archive or layer upload accepted, in bytes: as sent, and as unpacked. */
  maxUploadBytes: number;
  /**
   * Registries (`host[:port]`) a non-admin key may pull from, and their token services may be
   * on; an admin's pull may reach any. None: only admins pull.
   */
  pullRegistries?: string[];
  logger: { warn(msg: string, meta?: unknown): void };
  /** Named steps where a fault-injection test crashes the process (see WarrenOptions.crashAt). */
  failpoint?: (step: string) => void;
  /** Refuses (resource_exhausted) `what` when the data disk is down to its reserve. */
  checkDisk?: (what: string) => Promise<void>;
}

/** Counts bytes through a stream and refuses more than `max`. */
function limit(max: number, onBytes?: (n: number) => void): Transform {
  let n = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      n += chunk.length;
      if (n > max) cb(new WarrenError('payload_too_large', `uploads are limited to ${max} bytes`, { maxBytes: max }));
      else {
        onBytes?.(n);
        cb(null, chunk);
      }
    },
  });
}

/**
 * A node's answer of the layers a sandbox's stand for alone (a commit's `under`, a fork's
 * `alone`): each of `layers` as it was, but a fork base's entry, which may be any layer digest
 * (pure). Anything else (more, fewer, other layers: a node choosing what goes into an image) is
 * refused as the node's fault.
 */
export function checkLayersAlone(layers: string[], answer: unknown): string[] {
  const ok =
    Array.isArray(answer) &&
    answer.length === layers.length &&
    answer.every((d, i) => typeof d === 'string' && /^sha256:[0-9a-f]{64}$/.test(d) && (forkBaseOf(layers[i]!) !== null || d === layers[i]));
  if (!ok) throw new WarrenError('unavailable', 'the node answered layers other than its sandbox’s');
  return answer as string[];
}

/** Images and layers of this node: import, upload, commit, delete and garbage collection. */
export class ImageService {
  constructor(
    private readonly store: ImageCatalogue,
    /** The edges whose sandboxes' layers garbage collection keeps (every node not down). */
    private readonly edges: () => EdgeApi[],
    private readonly o: ImageServiceOptions,
  ) {}

  private scratch(): Promise<string> {
    return mkdtemp(join(this.store.blobs.root, 'tmp', 'import-'));
  }

  /**
   * A standalone layer from a tar (gzip or not), named; `owner`'s (null: an admin's, every
   * tenant's). A name another tenant holds is not taken over.
   */
  async uploadLayer(name: string, owner: string | null, body: NodeJS.ReadableStream): Promise<Layer> {
    await this.mayNameLayer(name, owner);
    await this.o.checkDisk?.('a layer upload');
    const limited = body.pipe(limit(this.o.maxUploadBytes));
    body.on('error', (e: Error) => limited.destroy(e));
    const source = gunzipIfCompressed(limited, 'the layer');
    const info = await this.store.addLayerTar(source, { idMap: this.o.idMap, ops: this.o.ops, maxBytes: this.o.maxUploadBytes });
    try {
      // Again: another tenant may have taken the name while this one was sent.
      await this.mayNameLayer(name, owner);
      return await this.store.nameLayer(name, info.digest, owner);
    } finally {
      this.store.unpin(info.digest);
    }
  }

  /**
   * An image from a `docker save` or OCI layout tarball: received to a scratch file (the
   * formats need random access), then each layer converted. Progress goes to `emit`.
   */
  async importImage(name: string, owner: string | null, body: NodeJS.ReadableStream, emit: (ev: ImageEvent) => void): Promise<Image> {
    await this.mayName(name, owner);
    await this.o.checkDisk?.('an import');
    const scratch = await this.scratch();
    try {
      const file = join(scratch, 'upload');
      let last = 0;
      await pipeline(
        body,
        limit(this.o.maxUploadBytes, (n) => {
          if (n - last >= 8 << 20) {
            last = n;
            emit({ type: 'progress', phase: 'receive', bytes: n });
          }
        }),
        createWriteStream(file),
      );
      return await this.nameImage(name, owner, () => importArchive(file, this.store, { ...this.conversion(owner, emit), scratch }));
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }

  /** How an import or a pull converts layers for `owner` (null: an admin), reporting to `emit`. */
  private conversion(owner: string | null, emit: (ev: ImageEvent) => void) {
    return {
      idMap: this.o.idMap,
      ops: this.o.ops,
      onProgress: (p: { phase: 'layer'; layer: number; layers: number; bytes: number }) => emit({ type: 'progress', ...p }),
      tenant: owner ?? undefined,
      maxBytes: this.o.maxUploadBytes,
    };
  }

  /** An image from an OCI registry; layers converted before are not fetched again. */
  async pullImage(
    ref: string,
    name: string | undefined,
    owner: string | null,
    emit: (ev: ImageEvent) => void,
    credentials?: RegistryCredentials,
  ): Promise<Image> {
    const parsed = parseImageRef(ref);
    const allowHost = this.pullHosts(ref, owner);
    const imageName = name ?? `${parsed.repository}:${parsed.reference.startsWith('sha256:') ? parsed.reference.slice(7, 19) : parsed.reference}`.toLowerCase();
    await this.mayName(imageName, owner);
    await this.o.checkDisk?.('a pull');
    return this.nameImage(imageName, owner, () => pullImage(ref, this.store, { ...this.conversion(owner, emit), credentials, allowHost }));
  }

  /**
   * Whether `owner` (null: an admin, who may pull from anywhere) may pull `ref`: a non-admin only
   * from the registries the operator allows (permission_denied otherwise). Returns the check for
   * the hosts its token service may be on (undefined: any).
   */
  pullHosts(ref: string, owner: string | null): ((host: string) => boolean) | undefined {
    if (owner === null) return undefined;
    const { registry } = parseImageRef(ref);
    const allowed = new Set((this.o.pullRegistries ?? []).map((h) => h.toLowerCase()));
    const allowHost = (host: string): boolean => allowed.has(host.toLowerCase());
    if (!allowHost(registry))
      throw new WarrenError(
        'permission_denied',
        `this node pulls only from the registries its operator allows (warren up --pull-registries); ${registry} is not one`,
        {
          registry,
        },
      );
    return allowHost;
  }

  /**
   * Names an image from the layers `make` adds (pinned while they have no name), with the
   * environment it read; when anything fails, what it added and nothing else holds is collected.
   */
  private async nameImage(name: string, owner: string | null, make: () => Promise<{ digests: string[]; env: Record<string, string> }>): Promise<Image> {
    try {
      const { digests, env } = await make();
      try {
        this.o.failpoint?.('import:layers');
        await this.mayName(name, owner);
        return await this.store.setImage(name, digests, owner, env);
      } finally {
        for (const d of digests) this.store.unpin(d);
      }
    } catch (e) {
      await this.collectGarbage().catch(() => undefined);
      throw e;
    }
  }

  /**
   * A sandbox's writable layer (frozen meanwhile), minus `exclude` and the platform's residues,
   * as a new layer over its current ones: the image `name`, with `env` (its source image's own;
   * never the create's, which may carry a caller's secrets).
   */
  async commit(
    edge: EdgeApi,
    id: string,
    layers: string[],
    owner: string | null,
    req: CommitRequest,
    env: Record<string, string> = {},
    o: { snapshot?: Image['snapshot'] } = {},
  ): Promise<Image> {
    await this.mayName(req.name, owner);
    await this.o.checkDisk?.('a commit');
    const info = await edge.commit(id, { exclude: req.exclude });
    // A fork's fork bases came back as layers of their own (pinned as the new one is).
    const under = checkLayersAlone(layers, info.under);
    const made = under.filter((d) => !layers.includes(d));
    try {
      await this.gather(edge, [...made, info.digest]);
      this.o.failpoint?.('commit:layer');
      await this.mayName(req.name, owner);
      return await this.store.setImage(req.name, [...under, info.digest], owner, env, { snapshot: o.snapshot });
    } finally {
      for (const d of [...made, info.digest]) this.store.unpin(d);
    }
  }

  /**
   * Layers a node made (a commit, a fork base) copied from it into this replica's blob store, so
   * every node reads them from there (a replica that shares the node's store already has them).
   * What the node sends must be the layer it names (the digest covers every byte), and no larger
   * than an upload may be.
   */
  async gather(edge: EdgeApi, digests: string[]): Promise<void> {
    const blobs = this.store.blobs;
    const lacking: string[] = [];
    for (const d of new Set(digests)) if (!(await blobs.hasLayer(d))) lacking.push(d);
    if (lacking.length) await this.o.checkDisk?.('layers made on a node');
    for (const d of lacking) {
      const dir = await this.scratch();
      try {
        const fetch = async (part: 'meta' | 'data'): Promise<string | null> => {
          const file = join(dir, part);
          try {
            await pipeline(Readable.from(await edge.readLayer(d, part)), limit(this.o.maxUploadBytes), createWriteStream(file));
          } catch (e) {
            // A layer made before its data was split off has none.
            if (part === 'data' && e instanceof WarrenError && e.code === 'not_found') return null;
            throw e;
          }
          return file;
        };
        const meta = (await fetch('meta'))!;
        const data = await fetch('data');
        const known = await layerDigest(meta, data);
        if (known.digest !== d) throw new WarrenError('unavailable', `a node sent a layer other than ${d}`, { digest: d });
        await blobs.addLayerFile(meta, data, known);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }
  }

  /**
   * A tenant names only images that are new or its own (`owner` null: an admin, who may replace
   * any; its images are every tenant's).
   */
  private async mayName(name: string, owner: string | null): Promise<void> {
    const cur = await this.store.getImage(name);
    if (cur && owner !== null && cur.tenant !== owner) throw new WarrenError('permission_denied', `the image name "${name}" is taken`, { image: name });
  }

  private async mayNameLayer(name: string, owner: string | null): Promise<void> {
    const holder = await this.store.layerNameTenant(name);
    if (holder !== undefined && owner !== null && holder !== owner)
      throw new WarrenError('permission_denied', `the layer name "${name}" is taken`, { layer: name });
  }

  /** Names an image from layer digests this node has, or its blob store has (metadata fetched now). */
  async putImage(name: string, layers: string[], env: Record<string, string> = {}): Promise<Image> {
    for (const d of layers) {
      if (!(await this.store.blobs.ensureMeta(d))) throw new WarrenError('not_found', `layer ${d} is not on this node and it has no blob store`, { layer: d });
    }
    return this.store.setImage(name, layers, null, env);
  }

  async deleteImage(name: string): Promise<void> {
    if (!(await this.store.deleteImage(name))) throw new WarrenError('not_found', `image "${name}" does not exist`, { image: name });
    await this.collectGarbage();
  }

  async deleteLayer(name: string): Promise<void> {
    if (!(await this.store.deleteLayerName(name))) throw new WarrenError('not_found', `layer "${name}" does not exist`, { layer: name });
    await this.collectGarbage();
  }

  /** Copies layers to a registry blob store; they stay pinned here while they are sent. */
  async publish(req: PublishLayersRequest): Promise<PublishLayersResponse> {
    const digests: string[] = [];
    if (req.image) {
      const img = await this.store.getImage(req.image);
      if (!img) throw new WarrenError('not_found', `image "${req.image}" does not exist`, { image: req.image });
      digests.push(...img.layers);
    }
    for (const ref of req.layers ?? []) {
      const d = await this.store.resolveLayer(ref);
      if (!d) throw new WarrenError('not_found', `layer "${ref}" does not exist`, { layer: ref });
      digests.push(d);
    }
    if (!digests.length) throw new WarrenError('invalid_argument', 'name an image or layers to publish');
    const unique = [...new Set(digests)];
    const to = parseOciStoreUrl(req.to, req.auth);
    if (!to) throw new WarrenError('invalid_argument', `not a registry blob store: ${req.to}`);
    for (const d of unique) this.store.pin(d);
    try {
      return { layers: await publishLayers(this.store.blobs, to, unique) };
    } finally {
      for (const d of unique) this.store.unpin(d);
    }
  }

  /** Frees layers that no image, named layer or live sandbox uses (and unmounts them). */
  async collectGarbage(): Promise<string[]> {
    const edges = this.edges();
    const inUse = await Promise.all(edges.map((e) => e.layersInUse()));
    const removed = await this.store.collectGarbage(new Set(inUse.flat()));
    await Promise.all(edges.map((e) => e.forgetLayers(removed)));
    return removed;
  }
}
