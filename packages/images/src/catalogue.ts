import type { Image } from '@warren/api';

/** A standalone layer's name: what it points at and who holds it. */
export interface LayerNameRow {
  name: string;
  digest: string;
  createdAt: string;
  /** Its tenant; null: every tenant's. */
  tenant: string | null;
}

/**
 * Where the catalogue of images and layer names is kept: the control plane's store (one source
 * of truth for every node; SQLite embedded, PostgreSQL in a cluster). Each call is one
 * transaction; the blobs the rows point at are on the nodes (LayerStore).
 */
export interface CatalogueStore {
  getImage(name: string): Promise<Image | undefined>;
  /** By name. */
  listImages(): Promise<Image[]>;
  /** Sets an image's row, replacing one of that name. */
  putImage(image: Image): Promise<void>;
  /** Whether there was one. */
  deleteImage(name: string): Promise<boolean>;
  getLayerName(name: string): Promise<LayerNameRow | undefined>;
  /** By name. */
  listLayerNames(): Promise<LayerNameRow[]>;
  putLayerName(row: LayerNameRow): Promise<void>;
  /** Whether there was one. */
  deleteLayerName(name: string): Promise<boolean>;
  /** The layer a tar with this diffID was converted to (a tar is converted once). */
  layerSource(diffId: string): Promise<string | undefined>;
  putLayerSource(diffId: string, digest: string): Promise<void>;
  /** Forgets the sources that point at these layers (their blobs are gone). */
  deleteLayerSources(digests: string[]): Promise<void>;
  /** Whether an image or a layer name that `tenant` may use (undefined: any tenant's) holds `digest`. */
  holdsLayer(digest: string, tenant?: string): Promise<boolean>;
  /** Every digest an image or a layer name holds. */
  namedLayers(): Promise<Set<string>>;
}
