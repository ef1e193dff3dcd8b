import { mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { buildBusyboxRootfs } from './busybox.js';
import { buildDebianRootfs } from './debian.js';
import { mkfsErofs } from './erofs.js';
import { DEFAULT_ID_MAP, type IdMap } from './idmap.js';
import { fileDigest, type LayerStore } from './layer-store.js';
import { shiftOwnership } from './rootfs.js';

/** The base images every Warren node has, built from Debian's packages without other network. */
export const DEFAULT_IMAGES = {
  'busybox:latest': { file: 'busybox.erofs', build: (dir: string) => buildBusyboxRootfs(dir) },
  'debian-python:latest': { file: 'debian-python.erofs', build: (dir: string, signal?: AbortSignal) => buildDebianRootfs(dir, { signal }) },
} as const;
export type DefaultImageName = keyof typeof DEFAULT_IMAGES;

export interface PrepareOptions {
  cacheDir: string;
  idMap?: IdMap;
  only?: DefaultImageName[];
  log?: (msg: string) => void;
  signal?: AbortSignal;
}

/**
 * Builds each default image's EROFS layer into `cacheDir` once (ownership shifted into the
 * sandbox id range), with its digest beside it. Later calls find the cache and return at once.
 */
export async function prepareDefaultImages(opts: PrepareOptions): Promise<Map<DefaultImageName, { file: string; digest: string }>> {
  const idMap = opts.idMap ?? DEFAULT_ID_MAP;
  await mkdir(opts.cacheDir, { recursive: true });
  const out = new Map<DefaultImageName, { file: string; digest: string }>();
  for (const name of opts.only ?? (Object.keys(DEFAULT_IMAGES) as DefaultImageName[])) {
    const spec = DEFAULT_IMAGES[name];
    const file = join(opts.cacheDir, spec.file);
    const digestFile = `${file}.sha256`;
    const cached = await readFile(digestFile, 'utf8').catch(() => '');
    if (cached && (await stat(file).catch(() => null))) {
      out.set(name, { file, digest: cached.trim() });
      continue;
    }
    opts.log?.(`building ${name} (once; cached in ${opts.cacheDir})`);
    const work = await mkdtemp(join(opts.cacheDir, '.build-'));
    try {
      const rootfs = join(work, 'rootfs');
      await mkdir(rootfs);
      await spec.build(rootfs, opts.signal);
      await shiftOwnership(rootfs, idMap);
      const tmp = join(work, spec.file);
      await mkfsErofs(tmp, rootfs, opts.signal);
      const digest = await fileDigest(tmp);
      await rename(tmp, file);
      await writeFile(digestFile, digest + '\n');
      out.set(name, { file, digest });
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }
  return out;
}

/** Puts the cached default images into a node's layer store under their names. */
export async function installDefaultImages(store: LayerStore, prepared: Map<DefaultImageName, { file: string; digest: string }>): Promise<void> {
  for (const [name, { file, digest }] of prepared) {
    const existing = store.getImage(name);
    if (existing && existing.layers.length === 1 && existing.layers[0] === digest) continue;
    await store.addLayerFile(file, digest);
    await store.setImage(name, [digest]);
  }
}
