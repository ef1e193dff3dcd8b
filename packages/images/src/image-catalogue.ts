import { readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import type { Image } from '@warren/api';
import type { CatalogueStore, LayerNameRow } from './catalogue.js';
import type { IdMap } from './idmap.js';
import { checkLayerName, digestHex, type LayerInfo, type LayerStore, type NamedLayer } from './layer-store.js';
import type { FsOps } from './unpack.js';

/** Whether a row of `owner` (null: every tenant's) is for `tenant` (undefined: any). */
const usableBy = (owner: string | null | undefined, tenant: string | undefined): boolean =>
  tenant === undefined || owner === null || owner === undefined || owner === tenant;

/**
 * Images and layer names (rows in the control plane's store) over the layer blobs of this node
 * (a LayerStore): what a name means, who may use it, and which blobs nothing names any more.
 */
export class ImageCatalogue {
  constructor(
    readonly blobs: LayerStore,
    private readonly rows: CatalogueStore,
  ) {}

  /**
   * Names an image as a stack of layers, bottom first, with its own environment; `tenant` owns
   * it (null: every tenant's).
   */
  async setImage(
    name: string,
    layers: string[],
    tenant: string | null = null,
    env: Record<string, string> = {},
    o: { builtIn?: boolean; snapshot?: Image['snapshot'] } = {},
  ): Promise<Image> {
    let sizeBytes = 0;
    for (const l of layers) sizeBytes += await this.blobs.layerSize(l);
    const image: Image = { name, layers, sizeBytes, createdAt: new Date().toISOString(), tenant, env, builtIn: o.builtIn ?? false };
    if (o.snapshot) image.snapshot = o.snapshot;
    await this.rows.putImage(image);
    return image;
  }

  getImage(name: string): Promise<Image | undefined> {
    return this.rows.getImage(name);
  }

  listImages(): Promise<Image[]> {
    return this.rows.listImages();
  }

  /** Removes an image's name (its layers go at the next garbage collection). */
  deleteImage(name: string): Promise<boolean> {
    return this.rows.deleteImage(name);
  }

  /** Names a stored layer; `tenant` owns the name (null: every tenant's). */
  async nameLayer(name: string, digest: string, tenant: string | null = null): Promise<NamedLayer> {
    checkLayerName(name);
    digestHex(digest);
    const row: LayerNameRow = { name, digest, createdAt: new Date().toISOString(), tenant };
    await this.rows.putLayerName(row);
    return { ...row, sizeBytes: await this.blobs.layerSize(digest) };
  }

  /** Who holds a layer name: a tenant, null (every tenant's) or undefined (nobody, it is free). */
  async layerNameTenant(name: string): Promise<string | null | undefined> {
    return (await this.rows.getLayerName(name))?.tenant;
  }

  deleteLayerName(name: string): Promise<boolean> {
    return this.rows.deleteLayerName(name);
  }

  async listLayers(): Promise<NamedLayer[]> {
    const out: NamedLayer[] = [];
    for (const l of await this.rows.listLayerNames()) out.push({ ...l, sizeBytes: await this.blobs.layerSize(l.digest) });
    return out;
  }

  /**
   * A layer by name or by `sha256:` digest; undefined when unknown. With `tenant` (undefined: no
   * check), only what that tenant may use: names and images that are every tenant's or its own
   * (a digest counts when such an image or name holds it).
   */
  async resolveLayer(ref: string, tenant?: string): Promise<string | undefined> {
    if (ref.startsWith('sha256:')) return (await this.rows.holdsLayer(ref, tenant)) ? ref : undefined;
    const l = await this.rows.getLayerName(ref);
    return l && usableBy(l.tenant, tenant) ? l.digest : undefined;
  }

  /**
   * The blob an earlier conversion made of the tar with this diffID, pinned (unpin it), if it is
   * still stored and `tenant` (undefined: no check) may use it: a caller that only names a
   * diffID, without sending its bytes, gets no layer it could not stack on a create anyway.
   * Pinned before it is looked for on disk, so a garbage collection meanwhile cannot take it
   * between the answer and its use.
   */
  async pinKnownLayer(diffId: string, tenant?: string): Promise<string | undefined> {
    const d = await this.rows.layerSource(diffId);
    if (!d) return undefined;
    this.blobs.pin(d);
    if ((await this.blobs.hasLayer(d)) && (tenant === undefined || (await this.resolveLayer(d, tenant)))) return d;
    this.blobs.unpin(d);
    return undefined;
  }

  /** LayerStore.addLayerTar, reusing and recording which blob each tar became. */
  async addLayerTar(
    source: AsyncIterable<Buffer>,
    o: { idMap: IdMap; ops: FsOps; expectDiffId?: string; signal?: AbortSignal; maxBytes?: number },
  ): Promise<LayerInfo> {
    const info = await this.blobs.addLayerTar(source, { ...o, known: (diffId) => this.pinKnownLayer(diffId) });
    await this.rows.putLayerSource(info.diffId, info.digest);
    return info;
  }

  pin(digest: string): void {
    this.blobs.pin(digest);
  }

  unpin(digest: string): void {
    this.blobs.unpin(digest);
  }

  /**
   * Removes every blob no image, layer name, pin or `inUse` digest (the layers of running
   * sandboxes) refers to, and the sources that pointed at them. Returns the digests removed.
   */
  async collectGarbage(inUse: Iterable<string>): Promise<string[]> {
    const keep = await this.rows.namedLayers();
    for (const d of inUse) keep.add(d);
    const removed = await this.blobs.collectGarbage(keep);
    if (removed.length) await this.rows.deleteLayerSources(removed);
    return removed;
  }

  /**
   * Takes the JSON index files of a data dir from before the catalogue was in the store
   * (`images.json`, `layers.json` beside the blobs) into the store, once: each is renamed to
   * `*.imported` after its rows are written, so a crash in between imports it again (the rows are
   * the same) and a later start never does.
   */
  async adoptIndexFiles(): Promise<{ images: number; layers: number }> {
    const read = async (file: string): Promise<unknown> => JSON.parse(await readFile(join(this.blobs.root, file), 'utf8').catch(() => 'null'));
    const done = (file: string): Promise<void> => rename(join(this.blobs.root, file), join(this.blobs.root, `${file}.imported`));
    let images = 0;
    let layers = 0;
    const old = (await read('images.json')) as Record<string, OldImage> | null;
    if (old) {
      for (const [name, r] of Object.entries(old)) {
        await this.rows.putImage({
          name,
          layers: r.layers,
          sizeBytes: r.sizeBytes,
          createdAt: r.createdAt,
          tenant: r.tenant ?? null,
          env: r.env ?? {},
          builtIn: r.builtIn ?? false,
        });
        images++;
      }
      await done('images.json');
    }
    const idx = (await read('layers.json')) as OldLayerIndex | null;
    if (idx) {
      for (const [name, l] of Object.entries(idx.named ?? {})) {
        await this.rows.putLayerName({ name, digest: l.digest, createdAt: l.createdAt, tenant: l.tenant ?? null });
        layers++;
      }
      for (const [diffId, digest] of Object.entries(idx.sources ?? {})) await this.rows.putLayerSource(diffId, digest);
      await done('layers.json');
    }
    return { images, layers };
  }
}

/** An image in the index file of older data dirs. */
interface OldImage {
  layers: string[];
  sizeBytes: number;
  createdAt: string;
  tenant?: string | null;
  env?: Record<string, string>;
  builtIn?: boolean;
}

/** The layer index file of older data dirs. */
interface OldLayerIndex {
  named?: Record<string, { digest: string; createdAt: string; tenant?: string | null }>;
  sources?: Record<string, string>;
}
