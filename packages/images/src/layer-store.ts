import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { copyFile, link, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { Image } from '@warren/api';

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

/**
 * Content-addressed EROFS layers and the image names that point at them, under one directory.
 * A layer file is written under a temporary name and renamed into place, so no half-written
 * layer is ever visible under its digest.
 */
export class LayerStore {
  readonly root: string;
  private images = new Map<string, ImageRecord>();

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

  private indexPath(): string {
    return join(this.root, 'images.json');
  }

  private async saveIndex(): Promise<void> {
    const tmp = `${this.indexPath()}.tmp`;
    await writeFile(tmp, JSON.stringify(Object.fromEntries(this.images), null, 2));
    await rename(tmp, this.indexPath());
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
