import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { ROUTES, WarrenError } from '@warren/api';
import type { On, RouteDeps } from './route-types.js';

/** File and archive routes (paths resolve inside the sandbox). */
export function fileRoutes(on: On, d: RouteDeps): void {
  const maxFile = d.files.maxFileBytes;
  const checkLength = (req: IncomingMessage): void => {
    if (Number(req.headers['content-length'] ?? 0) > maxFile)
      throw new WarrenError('payload_too_large', `uploads are limited to ${maxFile} bytes`, { maxBytes: maxFile });
  };
  const streamOut = async (res: ServerResponse, type: string, body: AsyncIterable<Uint8Array>): Promise<void> => {
    res.writeHead(200, { 'content-type': type });
    await pipeline(Readable.from(body), res).catch(() => res.destroy());
  };
  on(ROUTES.writeFile, async (c) => {
    const q = c.query();
    await d.sandboxes.check(c.caller, c.params.id);
    checkLength(c.req);
    await d.files.write(c.caller, c.params.id, q.path, c.req, q.mode === undefined ? undefined : parseInt(q.mode, 8));
    c.reply();
  });
  on(ROUTES.readFile, async (c) => {
    const q = c.query();
    await streamOut(c.res, 'application/octet-stream', await d.files.read(c.caller, c.params.id, q.path));
  });
  on(ROUTES.deleteFile, async (c) => {
    const q = c.query();
    await d.files.remove(c.caller, c.params.id, q.path, q.recursive ?? false);
    c.reply();
  });
  on(ROUTES.listFiles, async (c) => {
    const q = c.query();
    c.reply({ entries: await d.files.list(c.caller, c.params.id, q.path, q.depth ?? 1) });
  });
  on(ROUTES.statFile, async (c) => {
    const q = c.query();
    c.reply(await d.files.stat(c.caller, c.params.id, q.path));
  });
  on(ROUTES.mkdir, async (c) => {
    await d.sandboxes.check(c.caller, c.params.id);
    await d.files.makeDir(c.caller, c.params.id, (await c.body()).path);
    c.reply();
  });
  on(ROUTES.move, async (c) => {
    await d.sandboxes.check(c.caller, c.params.id);
    const body = await c.body();
    await d.files.move(c.caller, c.params.id, body.from, body.to);
    c.reply();
  });
  on(ROUTES.putArchive, async (c) => {
    const q = c.query();
    await d.sandboxes.check(c.caller, c.params.id);
    checkLength(c.req);
    await d.files.putArchive(c.caller, c.params.id, q.path, c.req);
    c.reply();
  });
  on(ROUTES.getArchive, async (c) => {
    const q = c.query();
    await streamOut(c.res, 'application/x-tar', await d.files.getArchive(c.caller, c.params.id, q.path));
  });
}
