import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import { digestHex, type LayerStore } from './layer-store.js';
import { RegistryClient, type RegistryCredentials } from './registry.js';

// A blob store in an OCI registry: each layer is an artifact manifest tagged with the layer's hex
// digest, whose blobs are the metadata image, the data file and the data's block digests. Any registry that speaks the
// distribution API holds them; nodes read the data file's blob with range requests.

export const LAYER_ARTIFACT = 'application/vnd.warren.layer.v1';
export const META_MEDIA_TYPE = 'application/vnd.warren.layer.meta.v1.erofs';
export const DATA_MEDIA_TYPE = 'application/vnd.warren.layer.data.v1';
export const BLOCKS_MEDIA_TYPE = 'application/vnd.warren.layer.blocks.v1';
const MANIFEST_TYPE = 'application/vnd.oci.image.manifest.v1+json';
const EMPTY = Buffer.from('{}');
const EMPTY_DIGEST = `sha256:${createHash('sha256').update(EMPTY).digest('hex')}`;

export interface OciStoreRef {
  client: RegistryClient;
  /** The store as written: `oci://host[:port]/repo` (HTTPS) or `oci+http://host[:port]/repo`. */
  url: string;
}

/** A blob store URL naming a registry repository, or null for a plain HTTP store. */
export function parseOciStoreUrl(url: string, credentials?: RegistryCredentials): OciStoreRef | null {
  const m = /^oci(\+http)?:\/\/([^/\s]+)\/([a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)\/?$/.exec(url);
  if (!m) {
    if (url.startsWith('oci')) throw new WarrenError('invalid_argument', `not a registry blob store (oci://host/repository): ${url}`);
    return null;
  }
  return { client: new RegistryClient({ registry: m[2] ?? '', repository: m[3] ?? '', reference: 'latest' }, fetch, m[1] !== undefined, credentials), url };
}

interface Desc {
  mediaType?: string;
  digest: string;
  size: number;
}

/** The metadata and data blobs of a layer in a registry store. */
export async function resolveOciLayer(store: OciStoreRef, hex: string): Promise<{ meta: Desc; data: Desc; blocks: Desc }> {
  const { doc } = await store.client.manifest(hex);
  const find = (type: string): Desc | undefined =>
    (doc.layers ?? []).find(
      (l): l is Desc => l.mediaType === type && /^sha256:[0-9a-f]{64}$/.test(l.digest) && Number.isSafeInteger(l.size) && (l.size ?? -1) >= 0,
    );
  const meta = find(META_MEDIA_TYPE);
  const data = find(DATA_MEDIA_TYPE);
  const blocks = find(BLOCKS_MEDIA_TYPE);
  if (!meta || !data || !blocks) throw new WarrenError('invalid_argument', `the registry's manifest for layer ${hex} is not a Warren layer`);
  return { meta, data, blocks };
}

async function fileDesc(path: string, mediaType: string): Promise<Desc> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return { mediaType, digest: `sha256:${h.digest('hex')}`, size: (await stat(path)).size };
}

/**
 * Copies layers into a registry store (blobs the registry has are not sent again). Layers whose
 * data lives in another store, or inside their metadata image, cannot be published from here.
 */
export async function publishLayers(layers: LayerStore, store: OciStoreRef, digests: string[]): Promise<{ digest: string; sent: boolean }[]> {
  const out: { digest: string; sent: boolean }[] = [];
  for (const digest of digests) {
    const hex = digestHex(digest);
    const metaPath = layers.layerPath(digest);
    const dataPath = join(layers.root, 'blobs', `${hex}.data`);
    const blocksPath = join(layers.root, 'blobs', `${hex}.blocks`);
    if (!(await stat(metaPath).catch(() => null))) throw new WarrenError('not_found', `no layer ${digest} on this node`);
    for (const p of [dataPath, blocksPath]) {
      if (!(await stat(p).catch(() => null))) throw new WarrenError('conflict', `layer ${digest} has no ${p.split('.').pop()} file on this node`);
    }
    const files = [
      [metaPath, META_MEDIA_TYPE],
      [dataPath, DATA_MEDIA_TYPE],
      [blocksPath, BLOCKS_MEDIA_TYPE],
    ] as const;
    const blobs: Desc[] = [];
    let sent = false;
    for (const [path, type] of files) {
      const b = await fileDesc(path, type);
      blobs.push(b);
      if (await store.client.hasBlob(b.digest)) continue;
      await store.client.pushBlob(b.digest, b.size, () => createReadStream(path) as AsyncIterable<Buffer>);
      sent = true;
    }
    if (!(await store.client.hasBlob(EMPTY_DIGEST))) {
      await store.client.pushBlob(EMPTY_DIGEST, EMPTY.length, async function* () {
        yield EMPTY;
      });
    }
    const manifest = {
      schemaVersion: 2,
      mediaType: MANIFEST_TYPE,
      artifactType: LAYER_ARTIFACT,
      config: { mediaType: 'application/vnd.oci.empty.v1+json', digest: EMPTY_DIGEST, size: EMPTY.length },
      layers: blobs,
      annotations: { 'dev.warren.layer.digest': digest },
    };
    await store.client.putManifest(hex, Buffer.from(JSON.stringify(manifest)), MANIFEST_TYPE);
    out.push({ digest, sent });
  }
  return out;
}
