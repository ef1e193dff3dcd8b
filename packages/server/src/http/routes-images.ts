import * as api from '@warren/api';
import { ROUTES, WarrenError, type ImageEvent } from '@warren/api';
import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseImageRef } from '@warren/images';
import type { Authed, On, RouteDeps } from './route-types.js';

const BLOB_NAME = /^[0-9a-f]{64}\.(erofs|data|blocks)$/;

/** Commit, import, pull and layer uploads make images: not for runner keys. */
const builds = (c: Pick<Authed, 'caller'>): void => {
  if (c.caller.role === 'runner') throw new WarrenError('permission_denied', 'a runner key cannot make images (commit, import, pull, layer upload)');
};

/** Whose a new image is: the caller's tenant's, or every tenant's when an admin makes it. */
const imageOwner = (c: Pick<Authed, 'caller'>): string | null => (c.caller.role === 'admin' ? null : c.caller.tenant);

const adminOnly = (c: Authed, what: string): void => {
  if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', `only an admin key can delete ${what}`);
};

/**
 * What an import, pull or upload answers for a failure that is not Warren's own: a full disk is
 * resource_exhausted; anything else is internal, named by its error code only (never a host path).
 */
export function unexpected(e: unknown): WarrenError {
  const code = (e as { code?: unknown } | null)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new WarrenError('resource_exhausted', "the node's data disk is full: the image does not fit");
  return new WarrenError('internal', typeof code === 'string' && /^E[A-Z]+$/.test(code) ? `the import failed (${code})` : 'the import failed');
}

/** Import, layer upload, commit and deletion of images and layers. */
export function imageRoutes(on: On, d: RouteDeps): void {
  /** Streams progress as it happens; a failure after the first line is the last line. */
  const progressStream = async (c: Authed, run: (emit: (ev: ImageEvent) => void) => Promise<api.Image>): Promise<void> => {
    c.res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
    const emit = (ev: ImageEvent): void => {
      c.res.write(JSON.stringify(ev) + '\n');
    };
    try {
      emit({ type: 'done', image: await run(emit) });
    } catch (e) {
      const err = e instanceof WarrenError ? e : unexpected(e);
      if (!(e instanceof WarrenError)) d.logger.warn('image import failed', { error: String(e) });
      emit({ type: 'error', error: { code: err.code, message: err.message } });
      c.req.resume();
    }
    c.res.end();
  };
  on(ROUTES.importImage, async (c) => {
    builds(c);
    const q = c.query();
    await progressStream(c, (emit) => d.images.importImage(q.name, imageOwner(c), c.req, emit));
  });
  on(ROUTES.pullImage, async (c) => {
    builds(c);
    const body = await c.body();
    parseImageRef(body.ref); // a bad reference is a 400, not a stream
    d.images.pullHosts(body.ref, imageOwner(c)); // and a registry it may not reach a 403
    await progressStream(c, (emit) => d.images.pullImage(body.ref, body.name, imageOwner(c), emit, body.auth));
  });
  on(ROUTES.putImage, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can name images from digests');
    const body = await c.body();
    c.reply(await d.images.putImage(api.ImageName.parse(c.params.name), body.layers, body.env));
  });
  on(ROUTES.deleteImage, async (c) => {
    adminOnly(c, 'images');
    if (!c.query().force) await d.imageUse.refuseWhileUsed(c.caller, c.params.name, 'image');
    await d.images.deleteImage(c.params.name);
    c.reply();
  });
  on(ROUTES.uploadLayer, async (c) => {
    builds(c);
    const q = c.query();
    c.reply(await d.images.uploadLayer(q.name, imageOwner(c), c.req));
  });
  on(ROUTES.publishLayers, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can publish layers');
    c.reply(await d.images.publish(await c.body()));
  });
  // The node's blob store over HTTP, for other nodes' on-demand views (ranges, HEAD, a listing).
  const blobDir = join(d.catalogue.blobs.root, 'blobs');
  on(ROUTES.listBlobs, async (c) => {
    if (c.caller.role !== 'admin' && !c.caller.node) throw new WarrenError('permission_denied', 'only an admin key can read the blob store');
    const names = (await readdir(blobDir)).filter((n) => BLOB_NAME.test(n));
    c.res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    c.res.end(`<html><body>\n${names.map((n) => `<a href="${n}">${n}</a>`).join('\n')}\n</body></html>\n`);
  });
  on(ROUTES.getBlob, async (c) => {
    if (c.caller.role !== 'admin' && !c.caller.node) throw new WarrenError('permission_denied', 'only an admin key can read the blob store');
    const name = c.params.file;
    if (!BLOB_NAME.test(name)) throw new WarrenError('not_found', `no blob ${name}`);
    const st = await stat(join(blobDir, name)).catch(() => null);
    if (!st?.isFile()) {
      // Made through another replica: read from its blobs.
      if (await d.peerBlob?.(name, c.req, c.res)) return;
      throw new WarrenError('not_found', `no blob ${name}`);
    }
    const range = /^bytes=(\d+)-(\d*)$/.exec(c.req.headers.range ?? '');
    const start = range ? Number(range[1]) : 0;
    const end = range?.[2] ? Math.min(Number(range[2]), st.size - 1) : st.size - 1;
    if (range && start >= st.size) {
      c.res.writeHead(416, { 'content-range': `bytes */${st.size}` });
      c.res.end();
      return;
    }
    c.res.writeHead(range ? 206 : 200, {
      'content-type': 'application/octet-stream',
      'content-length': st.size === 0 ? 0 : end - start + 1,
      'accept-ranges': 'bytes',
      'last-modified': st.mtime.toUTCString(),
      ...(range ? { 'content-range': `bytes ${start}-${end}/${st.size}` } : {}),
    });
    if (c.req.method === 'HEAD' || st.size === 0) {
      c.res.end();
      return;
    }
    await pipeline(createReadStream(join(blobDir, name), { start, end }), c.res).catch(() => c.res.destroy());
  });
  on(ROUTES.listLayers, async (c) => {
    const all = await d.catalogue.listLayers();
    const owner = imageOwner(c);
    c.reply({ layers: owner === null ? all : all.filter((l) => l.tenant === null || l.tenant === owner) });
  });
  on(ROUTES.deleteLayer, async (c) => {
    adminOnly(c, 'layers');
    await d.images.deleteLayer(c.params.name);
    c.reply();
  });
  on(ROUTES.commit, async (c) => {
    builds(c);
    const body = await c.body();
    const { sid, edge, rec } = await d.sandboxes.reach(c.caller, c.params.id);
    c.reply(await d.images.commit(edge, sid, rec.layers, imageOwner(c), body, rec.imageEnv));
  });
}
