import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { ROUTES, WarrenError } from '@warren/api';
import { sandboxId, type On, type RouteDeps } from './route-types.js';

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
    await d.sandboxes.live(c.caller, sandboxId(c));
    checkLength(c.req);
    await d.files.write(c.caller, sandboxId(c), q.path, c.req, q.mode === undefined ? undefined : parseInt(q.mode, 8));
    c.reply();
  });
  on(ROUTES.readFile, async (c) => {
    const q = c.query();
    await streamOut(c.res, 'application/octet-stream', await d.files.read(c.caller, sandboxId(c), q.path));
  });
  on(ROUTES.deleteFile, async (c) => {
    const q = c.query();
    await d.files.remove(c.caller, sandboxId(c), q.path, q.recursive ?? false);
    c.reply();
  });
  on(ROUTES.listFiles, async (c) => {
    const q = c.query();
    c.reply({ entries: await d.files.list(c.caller, sandboxId(c), q.path, q.depth ?? 1) });
  });
  on(ROUTES.statFile, async (c) => {
    const q = c.query();
    c.reply(await d.files.stat(c.caller, sandboxId(c), q.path));
  });
  on(ROUTES.mkdir, async (c) => {
    await d.sandboxes.live(c.caller, sandboxId(c));
    await d.files.makeDir(c.caller, sandboxId(c), (await c.body()).path);
    c.reply();
  });
  on(ROUTES.move, async (c) => {
    await d.sandboxes.live(c.caller, sandboxId(c));
    const body = await c.body();
    await d.files.move(c.caller, sandboxId(c), body.from, body.to);
    c.reply();
  });
  on(ROUTES.putArchive, async (c) => {
    const q = c.query();
    await d.sandboxes.live(c.caller, sandboxId(c));
    checkLength(c.req);
    await d.files.putArchive(c.caller, sandboxId(c), q.path, c.req);
    c.reply();
  });
  on(ROUTES.getArchive, async (c) => {
    const q = c.query();
    await streamOut(c.res, 'application/x-tar', await d.files.getArchive(c.caller, sandboxId(c), q.path));
  });
}
