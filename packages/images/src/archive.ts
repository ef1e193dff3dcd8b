import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { WarrenError } from '@warren/api';
import type { IdMap } from './idmap.js';
import type { ImageCatalogue } from './image-catalogue.js';
import { gunzipIfCompressed } from './gzip.js';
import { readTar } from './tar.js';
import { capped, type FsOps } from './unpack.js';
import { configEnv, type ImageConfigDoc } from './image-config.js';

/** What an image archive's manifest says its layers are, bottom first. */
export interface LayerRef {
  /** Path of the blob inside the archive. */
  path: string;
  /** Digest of the blob as stored (compressed or not), when the format names it. */
  blobDigest?: string;
  /** Digest of the uncompressed tar (diffID), when the config names it. */
  diffId?: string;
}

function bad(msg: string): WarrenError {
  return new WarrenError('invalid_argument', msg);
}

function json(files: Map<string, Buffer>, path: string): unknown {
  const b = files.get(path);
  if (!b) throw bad(`the archive has no ${path}`);
  try {
    return JSON.parse(b.toString('utf8'));
  } catch {
    throw bad(`${path} in the archive is not JSON`);
  }
}

const blobPath = (digest: string): string => {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw bad(`unsupported digest ${digest}`);
  return `blobs/sha256/${m[1]}`;
};

/** A JSON blob of an OCI layout, checked against the digest that names it. */
function blobJson(files: Map<string, Buffer>, digest: string): unknown {
  const path = blobPath(digest);
  const b = files.get(path);
  if (b && `sha256:${createHash('sha256').update(b).digest('hex')}` !== digest) throw bad(`${path} in the archive does not match its digest`);
  return json(files, path);
}

interface Descriptor {
  mediaType?: string;
  digest: string;
  platform?: { os?: string; architecture?: string };
  annotations?: Record<string, string>;
}

/** What an image archive holds: its layers, bottom first, and its config's environment. */
export interface ArchiveImage {
  layers: LayerRef[];
  env: Record<string, string>;
}

/**
 * Reads the layer list and environment of a `docker save` archive (manifest.json, legacy or
 * OCI-style paths) or of an OCI image layout (index.json → manifest, following one level of
 * image index to linux/amd64). Pure: works on the archive's small JSON files.
 */
export function archiveLayers(files: Map<string, Buffer>): ArchiveImage {
  if (files.has('manifest.json')) {
    const m = json(files, 'manifest.json') as Array<{ Config?: string; Layers?: string[] }>;
    const first = Array.isArray(m) ? m[0] : undefined;
    if (!first?.Layers?.length) throw bad('manifest.json lists no layers');
    const config = first.Config ? (json(files, first.Config) as ImageConfigDoc) : {};
    const diffIds = config.rootfs?.diff_ids ?? [];
    const layers = first.Layers.map((path, i) => ({
      path,
      diffId: diffIds[i],
      blobDigest: /^blobs\/sha256\/[0-9a-f]{64}$/.test(path) ? `sha256:${path.slice(13)}` : undefined,
    }));
    return { layers, env: configEnv(config) };
  }
  if (files.has('index.json')) {
    let desc = (json(files, 'index.json') as { manifests?: Descriptor[] }).manifests?.[0];
    for (let depth = 0; desc && depth < 2; depth++) {
      const doc = blobJson(files, desc.digest) as { manifests?: Descriptor[]; layers?: Descriptor[]; config?: Descriptor };
      if (doc.manifests) {
        desc = doc.manifests.find((d) => d.platform?.os === 'linux' && d.platform.architecture === 'amd64') ?? doc.manifests[0];
        continue;
      }
      if (!doc.layers?.length || !doc.config) throw bad('the image manifest lists no layers');
      const config = blobJson(files, doc.config.digest) as ImageConfigDoc;
      const diffIds = config.rootfs?.diff_ids ?? [];
      const layers = doc.layers.map((l, i) => {
        if (l.mediaType?.includes('zstd')) throw bad(`layer ${l.digest} is zstd-compressed, which is not supported; use gzip or none`);
        return { path: blobPath(l.digest), blobDigest: l.digest, diffId: diffIds[i] };
      });
      return { layers, env: configEnv(config) };
    }
    throw bad('index.json names no image manifest');
  }
  throw bad('not an image archive: no manifest.json (docker save) or index.json (OCI image layout)');
}

async function isGzip(file: string): Promise<boolean> {
  const fh = await open(file, 'r');
  try {
    const b = Buffer.alloc(2);
    await fh.read(b, 0, 2, 0);
    return b[0] === 0x1f && b[1] === 0x8b;
  } finally {
    await fh.close();
  }
}

/** A byte range of a file, hashed as it is read; `digest()` once it has been read through. */
function hashedRange(file: string, start: number, size: number): { stream: AsyncIterable<Buffer>; digest: () => string } {
  const h = createHash('sha256');
  const raw = size === 0 ? [] : createReadStream(file, { start, end: start + size - 1 });
  return {
    stream: (async function* () {
      for await (const c of raw) {
        h.update(c as Buffer);
        yield c as Buffer;
      }
    })(),
    digest: () => `sha256:${h.digest('hex')}`,
  };
}

export interface ImportProgress {
  (ev: { phase: 'layer'; layer: number; layers: number; bytes: number }): void;
}

/**
 * Imports an image archive file (a `docker save` tarball or an OCI image layout tarball, either
 * optionally gzipped) into the store: each layer checked against the digests the archive names
 * and converted to one EROFS blob. Returns the blobs' digests, bottom first (pinned: the caller
 * names the image, then unpins), and the image's environment. `tenant` (undefined: an admin's)
 * is who imports: a layer converted before is taken by its diffID, unread, only when that tenant
 * may use it already; else its bytes are read and hashed like any other.
 */
export async function importArchive(
  file: string,
  store: ImageCatalogue,
  o: { idMap: IdMap; ops: FsOps; scratch: string; onProgress?: ImportProgress; tenant?: string; maxBytes?: number },
): Promise<{ digests: string[]; env: Record<string, string> }> {
  let tarFile = file;
  if (await isGzip(file)) {
    tarFile = `${o.scratch}/archive.tar`;
    const max = o.maxBytes ?? Infinity;
    await pipeline(createReadStream(file), createGunzip(), (src: AsyncIterable<Buffer>) => capped(src, max, 'the archive'), createWriteStream(tarFile)).catch(
      (e: unknown) => {
        throw e instanceof WarrenError ? e : bad(`the archive is not valid gzip: ${(e as Error).message}`);
      },
    );
  }
  const entries = new Map<string, { offset: number; size: number }>();
  const small = new Map<string, Buffer>();
  let smallBytes = 0;
  await readTar(createReadStream(tarFile) as AsyncIterable<Buffer>, async (e, body) => {
    const path = e.path.replace(/^\.\//, '');
    if (e.type !== 'file') return;
    entries.set(path, { offset: e.offset, size: e.size });
    // Manifests, configs and indexes are small; what could be one is kept in memory, within reason.
    if (e.size <= 4 << 20 && (path.endsWith('.json') || path.startsWith('blobs/') || !path.includes('/'))) {
      smallBytes += e.size;
      if (smallBytes > 64 << 20) throw bad('the archive holds more than 64 MiB of small files; not an image archive?');
      const chunks: Buffer[] = [];
      for await (const c of body) chunks.push(c);
      small.set(path, Buffer.concat(chunks));
    }
  });
  const { layers: refs, env } = archiveLayers(small);
  const digests: string[] = [];
  try {
    for (const [i, ref] of refs.entries()) {
      const at = entries.get(ref.path.replace(/^\.\//, ''));
      if (!at) throw bad(`the archive lacks layer ${ref.path}`);
      // A layer converted before (same diffID) is not read again.
      const known = ref.diffId ? await store.pinKnownLayer(ref.diffId, o.tenant) : undefined;
      if (known) {
        digests.push(known);
      } else {
        const range = hashedRange(tarFile, at.offset, at.size);
        const info = await store.addLayerTar(gunzipIfCompressed(range.stream, `layer ${i + 1}`), {
          idMap: o.idMap,
          ops: o.ops,
          expectDiffId: ref.diffId,
          maxBytes: o.maxBytes,
        });
        digests.push(info.digest);
        const got = range.digest();
        if (ref.blobDigest && got !== ref.blobDigest) throw bad(`layer ${i + 1} does not match its digest: expected ${ref.blobDigest}, got ${got}`);
      }
      o.onProgress?.({ phase: 'layer', layer: i + 1, layers: refs.length, bytes: at.size });
    }
    return { digests, env };
  } catch (e) {
    for (const d of digests) store.unpin(d);
    throw e;
  }
}
