import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import * as api from '@warren/api';
import { ROUTES, WarrenError } from '@warren/api';
import { jsonBody, query, sendEmpty, sendJson } from './io.js';
import { liveSandboxId, type Authed, type On, type RouteDeps } from './route-types.js';

/** File and archive routes (paths resolve inside the sandbox). */
export function fileRoutes(on: On, d: RouteDeps): void {
  const liveId = (c: Authed): string => liveSandboxId(d, c);
  const maxFile = d.edge.maxFileBytes;
  const checkLength = (req: IncomingMessage): void => {
    if (Number(req.headers['content-length'] ?? 0) > maxFile)
      throw new WarrenError('payload_too_large', `uploads are limited to ${maxFile} bytes`, { maxBytes: maxFile });
  };
  const streamOut = async (res: ServerResponse, type: string, body: AsyncIterable<Buffer>): Promise<void> => {
    res.writeHead(200, { 'content-type': type });
    await pipeline(Readable.from(body), res).catch(() => res.destroy());
  };
  on(ROUTES.writeFile, async (c) => {
    const q = query(c.url, api.WriteFileQuery);
    const sid = liveId(c);
    checkLength(c.req);
    await d.edge.files.write(sid, q.path, c.req, q.mode === undefined ? undefined : parseInt(q.mode, 8));
    sendEmpty(c.res);
  });
  on(ROUTES.readFile, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    await streamOut(c.res, 'application/octet-stream', await d.edge.files.read(liveId(c), q.path));
  });
  on(ROUTES.deleteFile, async (c) => {
    const q = query(c.url, api.DeleteFileQuery);
    await d.edge.files.remove(liveId(c), q.path, q.recursive ?? false);
    sendEmpty(c.res);
  });
  on(ROUTES.listFiles, async (c) => {
    const q = query(c.url, api.ListFilesQuery);
    sendJson(c.res, 200, { entries: await d.edge.files.list(liveId(c), q.path, q.depth ?? 1) });
  });
  on(ROUTES.statFile, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    sendJson(c.res, 200, await d.edge.files.stat(liveId(c), q.path));
  });
  on(ROUTES.mkdir, async (c) => {
    const sid = liveId(c);
    await d.edge.files.mkdir(sid, (await jsonBody(c.req, api.MkdirRequest)).path);
    sendEmpty(c.res);
  });
  on(ROUTES.move, async (c) => {
    const sid = liveId(c);
    const body = await jsonBody(c.req, api.MoveRequest);
    await d.edge.files.move(sid, body.from, body.to);
    sendEmpty(c.res);
  });
  on(ROUTES.putArchive, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    const sid = liveId(c);
    checkLength(c.req);
    await d.edge.files.putArchive(sid, q.path, c.req);
    sendEmpty(c.res);
  });
  on(ROUTES.getArchive, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    await streamOut(c.res, 'application/x-tar', await d.edge.files.getArchive(liveId(c), q.path));
  });
}
