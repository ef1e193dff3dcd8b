import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { copyFile, link, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { Image } from '@warren/api';
import { mkfsErofs } from './erofs.js';
import type { IdMap } from './idmap.js';
import { unpackLayer, type FsOps } from './unpack.js';

/** Computes `sha256:<hex>` of a file. */
export async function fileDigest(file: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return `sha256:${h.digest('hex')}`;
}

export function digestHex(digest: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m?.[1]) throw new WarrenError('invalid_argument', `not a layer digest: ${digest}`);
  return m[1];
}

interface ImageRecord {
  layers: string[];
  sizeBytes: number;
  createdAt: string;
}

/** A layer made from a tar: its EROFS blob's digest and the tar's own (the OCI diffID). */
export interface LayerInfo {
  digest: string;
  diffId: string;
  sizeBytes: number;
  /** Whether an earlier conversion of the same tar was used (its source was not read). */
  reused?: boolean;
}

export interface NamedLayer {
  name: string;
  digest: string;
  sizeBytes: number;
  createdAt: string;
}

interface LayerIndex {
  /** Standalone layers by name (`workspace/swe-123`). */
  named: Record<string, { digest: string; createdAt: string }>;
  /** diffID → EROFS digest: the same tar is converted once. */
  sources: Record<string, string>;
}

let saves = 0;

const LAYER_NAME = /^[a-z0-9][a-z0-9._-]*(\/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9._-]+)?$/;

export function checkLayerName(name: string): string {
  if (name.length > 200 || !LAYER_NAME.test(name)) throw new WarrenError('invalid_argument', `not a valid layer name: ${name}`, { name });
  return name;
}

/**
 * Content-addressed EROFS layers and the image names that point at them, under one directory.
 * A layer file is written under a temporary name and renamed into place, so no half-written
 * layer is ever visible under its digest.
 */
export class LayerStore {
  readonly root: string;
  private images = new Map<string, ImageRecord>();
  private layerIndex: LayerIndex = { named: {}, sources: {} };
  /** Blobs being made or about to be named: garbage collection leaves them alone. */
  private readonly pinned = new Map<string, number>();

  constructor(root: string) {
    this.root = root;
  }

  /** Creates the directories and reads the image index. */
  async open(): Promise<void> {
    await mkdir(join(this.root, 'blobs'), { recursive: true });
    await mkdir(join(this.root, 'tmp'), { recursive: true });
    const text = await readFile(this.indexPath(), 'utf8').catch(() => '{}');
    const parsed = JSON.parse(text) as Record<string, ImageRecord>;
    this.images = new Map(Object.entries(parsed));
    const layers = JSON.parse(await readFile(this.layerIndexPath(), 'utf8').catch(() => '{}')) as Partial<LayerIndex>;
    this.layerIndex = { named: layers.named ?? {}, sources: layers.sources ?? {} };
    // Leftovers of conversions that died with the process.
    for (const n of await readdir(join(this.root, 'tmp'))) await rm(join(this.root, 'tmp', n), { recursive: true, force: true });
  }

  layerPath(digest: string): string {
    return join(this.root, 'blobs', `${digestHex(digest)}.erofs`);
  }

  /** Adds an EROFS file (hard-linked when possible, else copied); returns its digest. */
  async addLayerFile(file: string, knownDigest?: string): Promise<string> {
    const digest = knownDigest ?? (await fileDigest(file));
    const dest = this.layerPath(digest);
    if (await exists(dest)) return digest;
    const tmp = join(this.root, 'tmp', `${digestHex(digest)}.${process.pid}.${Date.now()}`);
    try {
      await link(file, tmp).catch(() => copyFile(file, tmp));
      await rename(tmp, dest);
    } finally {
      await rm(tmp, { force: true });
    }
    return digest;
  }

  /** Names an image as a stack of layers, bottom first. */
  async setImage(name: string, layers: string[]): Promise<Image> {
    let sizeBytes = 0;
    for (const l of layers) sizeBytes += (await stat(this.layerPath(l))).size;
    const rec: ImageRecord = { layers, sizeBytes, createdAt: new Date().toISOString() };
    this.images.set(name, rec);
    await this.saveIndex();
    return { name, ...rec };
  }

  getImage(name: string): Image | undefined {
    const rec = this.images.get(name);
    return rec ? { name, ...rec } : undefined;
  }

  listImages(): Image[] {
    return [...this.images.entries()].map(([name, rec]) => ({ name, ...rec })).sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Removes an image's name (its layers go at the next garbage collection). */
  async deleteImage(name: string): Promise<boolean> {
    if (!this.images.delete(name)) return false;
    await this.saveIndex();
    return true;
  }

  /**
   * Makes an EROFS layer from a layer tar (plain bytes; decompress first): unpacked in overlay
   * form into a private directory, converted, stored under its digest. A tar converted before
   * (same diffID) is not converted again. Nothing half-made is ever visible under a digest, and a
   * failure leaves nothing behind. The result is pinned until `unpin` (or a name) holds it.
   */
  async addLayerTar(source: AsyncIterable<Buffer>, o: { idMap: IdMap; ops: FsOps; expectDiffId?: string; signal?: AbortSignal }): Promise<LayerInfo> {
    const known = o.expectDiffId ? this.layerIndex.sources[o.expectDiffId] : undefined;
    if (known && (await exists(this.layerPath(known)))) {
      this.pin(known);
      return { digest: known, diffId: o.expectDiffId ?? '', sizeBytes: (await stat(this.layerPath(known))).size, reused: true };
    }
    const work = await mkdtemp(join(this.root, 'tmp', 'layer-'));
    try {
      const dir = join(work, 'root');
      await mkdir(dir, { mode: 0o755 });
      const unpacked = await unpackLayer(source, dir, { idMap: o.idMap, ops: o.ops });
      if (o.expectDiffId && unpacked.diffId !== o.expectDiffId)
        throw new WarrenError('invalid_argument', `layer content does not match its digest: expected ${o.expectDiffId}, got ${unpacked.diffId}`);
      const already = this.layerIndex.sources[unpacked.diffId];
      if (already && (await exists(this.layerPath(already)))) {
        this.pin(already);
        return { digest: already, diffId: unpacked.diffId, sizeBytes: (await stat(this.layerPath(already))).size };
      }
      const file = join(work, 'layer.erofs');
      await mkfsErofs(file, dir, o.signal);
      const digest = await fileDigest(file);
      this.pin(digest);
      await this.addLayerFile(file, digest);
      this.layerIndex.sources[unpacked.diffId] = digest;
      await this.saveLayerIndex();
      return { digest, diffId: unpacked.diffId, sizeBytes: (await stat(this.layerPath(digest))).size };
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /**
   * Makes an EROFS layer from a directory already in overlay form (a sandbox's upper dir), minus
   * `exclude` (paths relative to it) and paths matching `excludeRegex`. Pinned like addLayerTar's.
   */
  async addLayerDir(dir: string, exclude: string[], excludeRegex: string[] = [], signal?: AbortSignal): Promise<LayerInfo> {
    const work = await mkdtemp(join(this.root, 'tmp', 'commit-'));
    try {
      const file = join(work, 'layer.erofs');
      await mkfsErofs(file, dir, signal, exclude, excludeRegex);
      const digest = await fileDigest(file);
      this.pin(digest);
      await this.addLayerFile(file, digest);
      return { digest, diffId: '', sizeBytes: (await stat(this.layerPath(digest))).size };
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /** The blob an earlier conversion made of the tar with this diffID, if it is still stored. */
  knownLayer(diffId: string): string | undefined {
    const d = this.layerIndex.sources[diffId];
    return d && existsSync(this.layerPath(d)) ? d : undefined;
  }

  pin(digest: string): void {
    this.pinned.set(digest, (this.pinned.get(digest) ?? 0) + 1);
  }

  unpin(digest: string): void {
    const n = (this.pinned.get(digest) ?? 0) - 1;
    if (n > 0) this.pinned.set(digest, n);
    else this.pinned.delete(digest);
  }

  async nameLayer(name: string, digest: string): Promise<NamedLayer> {
    checkLayerName(name);
    digestHex(digest);
    const createdAt = new Date().toISOString();
    this.layerIndex.named[name] = { digest, createdAt };
    await this.saveLayerIndex();
    return { name, digest, sizeBytes: (await stat(this.layerPath(digest))).size, createdAt };
  }

  async deleteLayerName(name: string): Promise<boolean> {
    if (!this.layerIndex.named[name]) return false;
    delete this.layerIndex.named[name];
    await this.saveLayerIndex();
    return true;
  }

  async listLayers(): Promise<NamedLayer[]> {
    const out: NamedLayer[] = [];
    for (const [name, l] of Object.entries(this.layerIndex.named)) {
      const size = (await stat(this.layerPath(l.digest)).catch(() => null))?.size ?? 0;
      out.push({ name, digest: l.digest, sizeBytes: size, createdAt: l.createdAt });
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** A layer by name or by `sha256:` digest of a stored blob; undefined when unknown. */
  resolveLayer(ref: string): string | undefined {
    if (ref.startsWith('sha256:')) {
      const known = [...this.images.values()].some((i) => i.layers.includes(ref)) || Object.values(this.layerIndex.named).some((l) => l.digest === ref);
      return known ? ref : undefined;
    }
    return this.layerIndex.named[ref]?.digest;
  }

  /**
   * Removes every blob no image, named layer, pin or `inUse` digest (the layers of running
   * sandboxes) refers to. Returns the digests removed.
   */
  async collectGarbage(inUse: Iterable<string>): Promise<string[]> {
    const keep = new Set<string>(inUse);
    for (const i of this.images.values()) for (const l of i.layers) keep.add(l);
    for (const l of Object.values(this.layerIndex.named)) keep.add(l.digest);
    for (const d of this.pinned.keys()) keep.add(d);
    const removed: string[] = [];
    for (const n of await readdir(join(this.root, 'blobs'))) {
      const m = /^([0-9a-f]{64})\.erofs$/.exec(n);
      if (!m) continue;
      const digest = `sha256:${m[1]}`;
      if (keep.has(digest)) continue;
      await unlink(join(this.root, 'blobs', n)).catch(() => undefined);
      removed.push(digest);
    }
    if (removed.length) {
      const gone = new Set(removed);
      for (const [diffId, d] of Object.entries(this.layerIndex.sources)) if (gone.has(d)) delete this.layerIndex.sources[diffId];
      await this.saveLayerIndex();
    }
    return removed;
  }

  private indexPath(): string {
    return join(this.root, 'images.json');
  }

  private layerIndexPath(): string {
    return join(this.root, 'layers.json');
  }

  private async saveIndex(): Promise<void> {
    const tmp = `${this.indexPath()}.${process.pid}.${++saves}.tmp`;
    await writeFile(tmp, JSON.stringify(Object.fromEntries(this.images), null, 2));
    await rename(tmp, this.indexPath());
  }

  private async saveLayerIndex(): Promise<void> {
    const tmp = `${this.layerIndexPath()}.${process.pid}.${++saves}.tmp`;
    await writeFile(tmp, JSON.stringify(this.layerIndex, null, 2));
    await rename(tmp, this.layerIndexPath());
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}
