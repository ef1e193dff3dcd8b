import { mkdir, mkdtemp, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DEFAULT_PATH } from '@warren/api';
import { buildBusyboxRootfs } from './busybox.js';
import { buildDebianRootfs } from './debian.js';
import { buildDesktopRootfs } from './desktop.js';
import { mkfsErofs } from './erofs.js';
import { DEFAULT_ID_MAP, type IdMap } from './idmap.js';
import type { ImageCatalogue } from './image-catalogue.js';
import { layerDigest } from './layer-store.js';
import { shiftOwnership } from './rootfs.js';
import { runFile } from './exec-file.js';

/**
 * The base images a Warren node has, built from Debian's packages without other network. An
 * `extra` one (the full VMs' desktop: minutes to build, ~650 MB) only where asked for by name.
 */
export const DEFAULT_IMAGES = {
  'busybox:latest': { file: 'busybox.v2.erofs', extra: false, build: (dir: string) => buildBusyboxRootfs(dir) },
  'debian-python:latest': { file: 'debian-python.v3.erofs', extra: false, build: (dir: string, signal?: AbortSignal) => buildDebianRootfs(dir, { signal }) },
  'debian-desktop:latest': { file: 'debian-desktop.v3.erofs', extra: true, build: (dir: string, signal?: AbortSignal) => buildDesktopRootfs(dir, { signal }) },
} as const;
export type DefaultImageName = keyof typeof DEFAULT_IMAGES;

/** The default images a node builds when not told which: all but the extra ones. */
export const STANDARD_IMAGES = (Object.keys(DEFAULT_IMAGES) as DefaultImageName[]).filter((n) => !DEFAULT_IMAGES[n].extra);

/** A default image's layer in the cache: its files, digest and block digests. */
export interface PreparedImage {
  file: string;
  data: string;
  digest: string;
  blocks: Buffer;
}

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
export async function prepareDefaultImages(opts: PrepareOptions): Promise<Map<DefaultImageName, PreparedImage>> {
  const idMap = opts.idMap ?? DEFAULT_ID_MAP;
  await mkdir(opts.cacheDir, { recursive: true });
  await removeStaleBuilds(opts.cacheDir);
  const out = new Map<DefaultImageName, PreparedImage>();
  for (const name of opts.only ?? STANDARD_IMAGES) {
    const spec = DEFAULT_IMAGES[name];
    const file = join(opts.cacheDir, spec.file);
    const data = file.replace(/\.erofs$/, '.data');
    // The layer digest and block digests (see layerDigest), written after the files they describe.
    const digestFile = `${file}.digest`;
    const blocksFile = `${file}.blocks`;
    const cached = await readFile(digestFile, 'utf8').catch(() => '');
    const blocks = cached ? await readFile(blocksFile).catch(() => null) : null;
    if (cached && blocks && (await stat(file).catch(() => null)) && (await stat(data).catch(() => null))) {
      out.set(name, { file, data, digest: cached.trim(), blocks });
      continue;
    }
    // No digest may describe a file other than the one next to it.
    await rm(digestFile, { force: true });
    if ((await stat(file).catch(() => null)) && (await stat(data).catch(() => null))) {
      // Built before, digested the old way: digested again, not rebuilt.
      const known = await layerDigest(file, data);
      await writeFile(blocksFile, known.blocks);
      await writeFile(digestFile, known.digest + '\n');
      out.set(name, { file, data, ...known });
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
      const tmpData = join(work, 'layer.data');
      await mkfsErofs(tmp, rootfs, { data: tmpData, signal: opts.signal });
      const known = await layerDigest(tmp, tmpData);
      await rename(tmpData, data);
      await rename(tmp, file);
      await writeFile(blocksFile, known.blocks);
      await writeFile(digestFile, known.digest + '\n');
      out.set(name, { file, data, ...known });
    } finally {
      await removeBuildDir(work);
    }
  }
  return out;
}

/**
 * Removes a build directory. An interrupted debootstrap can leave proc/sys mounted inside its
 * target: those are unmounted first, so a recursive delete never walks into them.
 */
export async function removeBuildDir(dir: string): Promise<void> {
  const mounts = (await readFile('/proc/self/mounts', 'utf8'))
    .split('\n')
    .map((l) => (l.split(' ')[1] ?? '').replace(/\\040/g, ' '))
    .filter((m) => m === dir || m.startsWith(dir + '/'))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await runFile('umount', ['-l', m]).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
}

/** Build directories older than an hour belong to builds that died; they are removed. */
async function removeStaleBuilds(cacheDir: string): Promise<void> {
  for (const name of await readdir(cacheDir).catch(() => [])) {
    if (!name.startsWith('.build-')) continue;
    const st = await stat(join(cacheDir, name)).catch(() => null);
    if (st && Date.now() - st.mtimeMs > 3600_000) await removeBuildDir(join(cacheDir, name));
  }
}

/** Puts the cached default images into a node's layer store and the catalogue under their names. */
export async function installDefaultImages(catalogue: ImageCatalogue, prepared: Map<DefaultImageName, PreparedImage>): Promise<void> {
  for (const [name, { file, data, digest, blocks }] of prepared) {
    const existing = await catalogue.getImage(name);
    if (existing && existing.layers.length === 1 && existing.layers[0] === digest && existing.builtIn && (await catalogue.blobs.hasLayer(digest))) continue;
    await catalogue.blobs.addLayerFile(file, data, { digest, blocks });
    await catalogue.setImage(name, [digest], null, { PATH: DEFAULT_PATH }, { builtIn: true });
  }
}
