import type { Image } from '@warren/api';
import type { CatalogueStore } from '@warren/images';

/** A caller's own copy of a kept image (its arrays and maps too): structuredClone costs many times this on every create. */
const copy = (i: Image): Image => Object.assign({}, i, { layers: i.layers.slice(), env: Object.assign({}, i.env) });

/**
 * The catalogue's rows with each image found kept in memory for `ttlMs` (default 1 s): a burst
 * of creates from one image reads its row once a second per process, not once each. What this
 * process writes (an image named, replaced or deleted here) is seen at once; what another
 * replica writes, within `ttlMs`. An image not found is never kept: one made anywhere is usable
 * at once. Every other call goes to the store as it is.
 */
export function cachedImages(rows: CatalogueStore, o: { ttlMs?: number; now?: () => number } = {}): CatalogueStore {
  const ttl = o.ttlMs ?? 1000;
  const now = o.now ?? Date.now;
  const kept = new Map<string, { image: Image; until: number }>();
  /** Lookups in flight by name, shared by the calls that come meanwhile. */
  const reading = new Map<string, Promise<Image | undefined>>();
  /** Bumped by every write here: a lookup that started before one is not kept. */
  let writes = 0;
  return {
    getImage(name) {
      const k = kept.get(name);
      if (k && now() < k.until) return Promise.resolve(copy(k.image));
      let r = reading.get(name);
      if (!r) {
        const at = writes;
        r = rows.getImage(name).then((image) => {
          if (image && at === writes) {
            if (kept.size >= 10_000) kept.clear();
            kept.set(name, { image, until: now() + ttl });
          }
          return image;
        });
        const done = (): void => void reading.delete(name);
        r.then(done, done);
        reading.set(name, r);
      }
      return r.then((image) => (image ? copy(image) : undefined));
    },
    listImages: () => rows.listImages(),
    async putImage(image) {
      writes++;
      kept.delete(image.name);
      reading.delete(image.name);
      await rows.putImage(image);
      kept.delete(image.name);
    },
    async deleteImage(name) {
      writes++;
      kept.delete(name);
      reading.delete(name);
      const had = await rows.deleteImage(name);
      kept.delete(name);
      return had;
    },
    getLayerName: (name) => rows.getLayerName(name),
    listLayerNames: () => rows.listLayerNames(),
    putLayerName: (row) => rows.putLayerName(row),
    deleteLayerName: (name) => rows.deleteLayerName(name),
    layerSource: (diffId) => rows.layerSource(diffId),
    putLayerSource: (diffId, digest) => rows.putLayerSource(diffId, digest),
    deleteLayerSources: (digests) => rows.deleteLayerSources(digests),
    holdsLayer: (digest, tenant) => rows.holdsLayer(digest, tenant),
    namedLayers: () => rows.namedLayers(),
  };
}
