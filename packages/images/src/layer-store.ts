import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { copyFile, link, mkdir, mkdtemp, readdir, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import { mkfsErofs } from './erofs.js';
import type { IdMap } from './idmap.js';
import { unpackLayer, type FsOps } from './unpack.js';

/** Bytes of layer data each block digest covers: the on-demand view's unit of fetching and checking. */
export const BLOCK_BYTES = 1 << 20;

/** The sha256 of each BLOCK_BYTES block of a file (the last one may be short), one after another. */
export async function blockDigests(file: string): Promise<Buffer> {
  const out: Buffer[] = [];
  let h = createHash('sha256');
  let n = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: BLOCK_BYTES })) {
    let c = chunk as Buffer;
    while (c.length) {
      const take = Math.min(c.length, BLOCK_BYTES - n);
      h.update(c.subarray(0, take));
      n += take;
      c = c.subarray(take);
      if (n === BLOCK_BYTES) {
        out.push(h.digest());
        h = createHash('sha256');
        n = 0;
      }
    }
  }
  if (n > 0) out.push(h.digest());
  return Buffer.concat(out);
}

/**
 * A layer's identity: sha256 over its metadata image followed by the block digests of its data
 * file (returned too). A node that reads the data on demand checks the metadata and the block
 * digests against the layer digest once, then each block it fetches against its block digest.
 * A layer without a data file is the sha256 of its metadata image.
 */
export async function layerDigest(meta: string, data: string | null): Promise<{ digest: string; blocks: Buffer }> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(meta)) h.update(chunk as Buffer);
  const blocks = data ? await blockDigests(data) : Buffer.alloc(0);
  h.update(blocks);
  return { digest: `sha256:${h.digest('hex')}`, blocks };
}

/**
 * Where a node reads layer data it does not hold: a directory through which the blob store's
 * `<hex>.data` files are read on demand (a FUSE view, see RemoteBlobs), and how to get a layer's
 * metadata image, which is always kept whole on the node.
 */
export interface BlobSource {
  readonly dataDir: string;
  fetchMeta(hex: string, dest: string): Promise<void>;
}

export function digestHex(digest: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m?.[1]) throw new WarrenError('invalid_argument', `not a layer digest: ${digest}`);
  return m[1];
}

/** A layer made from a tar: its EROFS blob's digest and the tar's own (the OCI diffID). */
export interface LayerInfo {
  digest: string;
  diffId: string;
  sizeBytes: number;
}

export interface NamedLayer {
  name: string;
  digest: string;
  sizeBytes: number;
  createdAt: string;
  /** Its tenant; null: every tenant's. */
  tenant: string | null;
}

let saves = 0;

const LAYER_NAME = /^[a-z0-9][a-z0-9._-]*(\/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9._-]+)?$/;

export function checkLayerName(name: string): string {
  if (name.length > 200 || !LAYER_NAME.test(name)) throw new WarrenError('invalid_argument', `not a valid layer name: ${name}`, { name });
  return name;
}

/**
 * Content-addressed EROFS layers of one node, under one directory (what names them is the
 * catalogue's, in the control plane's store: ImageCatalogue). A layer file is written under a
 * temporary name and renamed into place, so no half-written layer is ever visible under its
 * digest.
 */
export class LayerStore {
  readonly root: string;
  /** Blobs being made or about to be named: garbage collection leaves them alone. */
  private readonly pinned = new Map<string, number>();

  constructor(root: string) {
    this.root = root;
  }

  /** Creates the directories and removes what a conversion that died left. */
  async open(): Promise<void> {
    await mkdir(join(this.root, 'blobs'), { recursive: true });
    await mkdir(join(this.root, 'tmp'), { recursive: true });
    // Leftovers of conversions that died with the process, and of block lists and sources an
    // on-demand fetch was writing beside the blobs.
    for (const n of await readdir(join(this.root, 'tmp'))) await rm(join(this.root, 'tmp', n), { recursive: true, force: true });
    for (const n of await readdir(join(this.root, 'blobs'))) if (n.endsWith('.tmp')) await rm(join(this.root, 'blobs', n), { force: true });
  }

  /** Where layer data this node lacks is read from (on demand); none: every layer is local. */
  remote: BlobSource | null = null;

  /**
   * A layer is two files: its EROFS metadata image (`<hex>.erofs`: inodes, directories, the
   * chunk index; small, always on the node, so path lookups never leave it) and its file data
   * (`<hex>.data`, the EROFS blob device), which may instead be read on demand from the blob
   * store. The digest covers both: sha256 of the metadata followed by the data.
   */
  layerPath(digest: string): string {
    return join(this.root, 'blobs', `${digestHex(digest)}.erofs`);
  }

  /**
   * The data file of a layer: the local one, else the blob store's through its on-demand view;
   * null for a layer whose metadata image holds its data (made before the split).
   */
  dataPath(digest: string): string | null {
    const local = join(this.root, 'blobs', `${digestHex(digest)}.data`);
    if (existsSync(local)) return local;
    if (this.remote) return join(this.remote.dataDir, `${digestHex(digest)}.data`);
    return null;
  }

  /** A layer's metadata image or data file on this node's own disk; null when it is not there. */
  localFile(digest: string, part: 'meta' | 'data'): string | null {
    const file = part === 'meta' ? this.layerPath(digest) : join(this.root, 'blobs', `${digestHex(digest)}.data`);
    return existsSync(file) ? file : null;
  }

  /** Whether a layer's data is read from the blob store rather than from this node's disk. */
  dataIsRemote(digest: string): boolean {
    return this.remote !== null && !existsSync(join(this.root, 'blobs', `${digestHex(digest)}.data`));
  }

  /** Whether the node has a layer's metadata (fetching it from the blob store when it can). */
  async ensureMeta(digest: string): Promise<boolean> {
    const meta = this.layerPath(digest);
    // A layer read on demand needs its block digests too (fetched with the metadata).
    if ((await exists(meta)) && (!this.dataIsRemote(digest) || (await exists(join(this.root, 'blobs', `${digestHex(digest)}.blocks`))))) return true;
    if (!this.remote) return false;
    const tmp = join(this.root, 'tmp', `${digestHex(digest)}.meta.${process.pid}.${++saves}`);
    try {
      await this.remote.fetchMeta(digestHex(digest), tmp);
      await rename(tmp, meta);
      return true;
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /**
   * Adds a layer's metadata image and data file (hard-linked when possible), with its block
   * digests beside them; returns its digest.
   */
  async addLayerFile(meta: string, data: string | null, known?: { digest: string; blocks: Buffer }): Promise<string> {
    const { digest, blocks } = known ?? (await layerDigest(meta, data));
    const dest = this.layerPath(digest);
    if (await exists(dest)) return digest;
    const hex = digestHex(digest);
    const put = async (file: string, to: string): Promise<void> => {
      const tmp = join(this.root, 'tmp', `${hex}.${process.pid}.${++saves}`);
      try {
        await link(file, tmp).catch(() => copyFile(file, tmp));
        await rename(tmp, to);
      } finally {
        await rm(tmp, { force: true });
      }
    };
    // Data first: a metadata image in place means the whole layer is.
    if (data) {
      const tmp = join(this.root, 'tmp', `${hex}.blocks.${process.pid}.${++saves}`);
      await writeFile(tmp, blocks);
      await rename(tmp, join(this.root, 'blobs', `${hex}.blocks`));
      await put(data, join(this.root, 'blobs', `${hex}.data`));
    }
    await put(meta, dest);
    return digest;
  }

  /** Bytes of a layer on disk (metadata + local data), or of its metadata when the data is remote. */
  async layerSize(digest: string): Promise<number> {
    const meta = (await stat(this.layerPath(digest)).catch(() => null))?.size ?? 0;
    const data = (await stat(join(this.root, 'blobs', `${digestHex(digest)}.data`)).catch(() => null))?.size ?? 0;
    return meta + data;
  }

  /**
   * Makes an EROFS layer from a layer tar (plain bytes; decompress first): unpacked in overlay
   * form into a private directory, converted, stored under its digest. A tar converted before
   * (same diffID, as `known` answers) is not converted again (callers that know the diffID ahead
   * ask the catalogue and do not read it at all). Nothing half-made is ever visible under a
   * digest, and a failure leaves nothing behind. The result is pinned until `unpin` (or a name)
   * holds it.
   */
  async addLayerTar(
    source: AsyncIterable<Buffer>,
    o: {
      idMap: IdMap;
      ops: FsOps;
      expectDiffId?: string;
      signal?: AbortSignal;
      maxBytes?: number;
      /** The stored blob an earlier conversion made of the tar with this diffID, if any, pinned. */
      known?: (diffId: string) => Promise<string | undefined>;
      /** Left out of the layer (paths relative to its root), as addLayerDir's. */
      exclude?: string[];
      excludeRegex?: string[];
    },
  ): Promise<LayerInfo> {
    const work = await mkdtemp(join(this.root, 'tmp', 'layer-'));
    try {
      const dir = join(work, 'root');
      await mkdir(dir, { mode: 0o755 });
      const unpacked = await unpackLayer(source, dir, { idMap: o.idMap, ops: o.ops, maxBytes: o.maxBytes });
      if (o.expectDiffId && unpacked.diffId !== o.expectDiffId)
        throw new WarrenError('invalid_argument', `layer content does not match its digest: expected ${o.expectDiffId}, got ${unpacked.diffId}`);
      const already = await o.known?.(unpacked.diffId);
      if (already) {
        return { digest: already, diffId: unpacked.diffId, sizeBytes: await this.layerSize(already) };
      }
      const file = join(work, 'layer.erofs');
      const data = join(work, 'layer.data');
      await mkfsErofs(file, dir, { data, exclude: o.exclude, excludeRegex: o.excludeRegex, signal: o.signal });
      const known = await layerDigest(file, data);
      const digest = known.digest;
      this.pin(digest);
      await this.addLayerFile(file, data, known);
      // With paths left out, the layer is not the tar: it has no diffID of its own (as a commit's).
      const whole = !o.exclude?.length && !o.excludeRegex?.length;
      return { digest, diffId: whole ? unpacked.diffId : '', sizeBytes: await this.layerSize(digest) };
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
      const data = join(work, 'layer.data');
      await mkfsErofs(file, dir, { data, exclude, excludeRegex, signal });
      const known = await layerDigest(file, data);
      const digest = known.digest;
      this.pin(digest);
      await this.addLayerFile(file, data, known);
      return { digest, diffId: '', sizeBytes: await this.layerSize(digest) };
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  pin(digest: string): void {
    this.pinned.set(digest, (this.pinned.get(digest) ?? 0) + 1);
  }

  unpin(digest: string): void {
    const n = (this.pinned.get(digest) ?? 0) - 1;
    if (n > 0) this.pinned.set(digest, n);
    else this.pinned.delete(digest);
  }

  /** Whether the node holds a layer's metadata image (its data may be read on demand). */
  hasLayer(digest: string): Promise<boolean> {
    return exists(this.layerPath(digest));
  }

  /**
   * Removes every blob that neither `keep` (what the catalogue names and running sandboxes use)
   * nor a pin holds. Returns the digests removed.
   */
  async collectGarbage(keep: Iterable<string>): Promise<string[]> {
    const held = new Set<string>(keep);
    for (const d of this.pinned.keys()) held.add(d);
    const removed: string[] = [];
    for (const n of await readdir(join(this.root, 'blobs'))) {
      const m = /^([0-9a-f]{64})\.(erofs|data|blocks|src)$/.exec(n);
      if (!m) continue;
      const digest = `sha256:${m[1]}`;
      if (held.has(digest)) continue;
      await unlink(join(this.root, 'blobs', n)).catch(() => undefined);
      if (m[2] === 'erofs') removed.push(digest);
    }
    return removed;
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
