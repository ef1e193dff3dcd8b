import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import * as api from '@warren/api';
import { ERROR_CODES, ROUTES, WarrenError, buildOpenApi, type ErrorCode } from '@warren/api';
import type { Edge } from '@warren/edge';
import type { LayerStore } from '@warren/images';
import type { Auth } from '../services/auth.js';
import type { Caller, SandboxService } from '../services/sandboxes.js';
import { Router, type RouteContext } from './router.js';
import { jsonBody, query, readBody, sendEmpty, sendError, sendJson } from './io.js';
import { streamCommand } from './ndjson.js';

export interface AppDeps {
  version: string;
  auth: Auth;
  sandboxes: SandboxService;
  edge: Edge;
  layers: LayerStore;
  /** Where this node's edge is reached (known once the server listens). */
  nodeAddress: () => string;
  logger: { warn(msg: string, meta?: unknown): void };
}

type Authed = RouteContext & { caller: Caller };

const isErrorCode = (c: string): c is ErrorCode => (ERROR_CODES as readonly string[]).includes(c);

/** Builds the HTTP server of the Warren API (routes from the contract, one error handler). */
export function createApp(d: AppDeps): Server {
  const router = new Router();
  const metrics = { requests: 0, errors: 0 };
  const openapi = JSON.stringify(buildOpenApi(d.version));

  const on = (spec: api.RouteSpec, h: (c: Authed) => Promise<void>): void => {
    router.add(spec, async (ctx) => {
      const caller = d.auth.authenticate(ctx.req.headers.authorization);
      await h({ ...ctx, caller });
    });
  };
  const svc = d.sandboxes;
  const id = (c: Authed): string => c.params.id ?? '';
  const liveId = (c: Authed): string => svc.live(c.caller, id(c)).id;

  // ---- sandboxes ----
  on(ROUTES.createSandbox, async (c) => {
    const body = await jsonBody(c.req, api.CreateSandboxRequest);
    sendJson(c.res, 201, await svc.toApi(await svc.create(c.caller, body), false));
  });
  on(ROUTES.batchCreate, async (c) => {
    const body = await jsonBody(c.req, api.BatchCreateRequest);
    const results = await Promise.allSettled(Array.from({ length: body.count }, () => svc.create(c.caller, { ...body.template, requestId: undefined })));
    const sandboxes: api.Sandbox[] = [];
    const errors: Array<{ code: string; message: string }> = [];
    for (const r of results) {
      if (r.status === 'fulfilled') sandboxes.push(await svc.toApi(r.value, false));
      else {
        const e = r.reason instanceof WarrenError ? r.reason : new WarrenError('internal', 'create failed');
        errors.push({ code: e.code, message: e.message });
      }
    }
    sendJson(c.res, 201, { sandboxes, errors });
  });
  on(ROUTES.listSandboxes, async (c) => {
    sendJson(c.res, 200, await svc.list(c.caller, query(c.url, api.ListSandboxesQuery, ['label'])));
  });
  on(ROUTES.getSandbox, async (c) => sendJson(c.res, 200, await svc.toApi(svc.record(c.caller, id(c)))));
  on(ROUTES.deleteSandbox, async (c) => {
    await svc.delete(c.caller, id(c));
    sendEmpty(c.res);
  });
  on(ROUTES.setTimeout, async (c) => {
    const body = await jsonBody(c.req, api.SetTimeoutRequest);
    sendJson(c.res, 200, await svc.toApi(svc.setTimeout(c.caller, id(c), body.ttlSeconds)));
  });
  on(ROUTES.pause, async (c) => {
    await svc.pause(c.caller, id(c));
    sendJson(c.res, 200, { state: 'paused' });
  });
  on(ROUTES.resume, async (c) => {
    await svc.resume(c.caller, id(c));
    sendJson(c.res, 200, { state: 'running' });
  });
  on(ROUTES.commit, async (c) => {
    svc.record(c.caller, id(c));
    throw new WarrenError('invalid_argument', 'commit is not available yet');
  });
  for (const op of ['pause', 'resume', 'delete'] as const) {
    const spec = op === 'pause' ? ROUTES.batchPause : op === 'resume' ? ROUTES.batchResume : ROUTES.batchDelete;
    on(spec, async (c) => {
      const body = await jsonBody(c.req, api.BatchByLabelsRequest);
      if (!Object.keys(body.labels).length) throw new WarrenError('invalid_argument', 'name at least one label');
      sendJson(c.res, 200, { count: await svc.batch(c.caller, op, body.labels) });
    });
  }

  // ---- commands and sessions ----
  on(ROUTES.exec, async (c) => {
    const sid = liveId(c);
    const body = await jsonBody(c.req, api.ExecRequest);
    const cmd = await d.edge.exec(sid, body);
    const accept = c.req.headers.accept ?? '';
    if (accept.includes('application/json') && !accept.includes('ndjson')) {
      const end = await cmd.wait();
      if (end.type === 'error') throw new WarrenError(isErrorCode(end.error.code) ? end.error.code : 'internal', end.error.message);
      if (end.type !== 'exit') throw new WarrenError('internal', 'command ended without exit');
      const { type: _t, ...exit } = end;
      sendJson(c.res, 200, { commandId: cmd.id, stdout: cmd.text('stdout'), stderr: cmd.text('stderr'), ...exit });
      return;
    }
    await streamCommand(c.res, cmd, 0, true);
  });
  on(ROUTES.commandOutput, async (c) => {
    const q = query(c.url, api.CommandOutputQuery);
    const cmd = d.edge.command(liveId(c), c.params.commandId ?? '');
    await streamCommand(c.res, cmd, q.offset ?? 0, (q.offset ?? 0) === 0);
  });
  on(ROUTES.killCommand, async (c) => {
    const body = await jsonBody(c.req, api.KillRequest);
    d.edge.command(liveId(c), c.params.commandId ?? '').signal(body.signal ?? 'SIGTERM');
    sendEmpty(c.res);
  });
  on(ROUTES.commandStdin, async (c) => {
    const cmd = d.edge.command(liveId(c), c.params.commandId ?? '');
    const data = await readBody(c.req, 16 * 1024 * 1024);
    if (data.length) cmd.writeStdin(data);
    if (c.url.searchParams.get('eof') === '1') cmd.closeStdin();
    sendEmpty(c.res);
  });
  on(ROUTES.createSession, async (c) => {
    const sid = liveId(c);
    const body = await jsonBody(c.req, api.CreateSessionRequest);
    sendJson(c.res, 201, { sessionId: await d.edge.createSession(sid, body) });
  });
  on(ROUTES.deleteSession, async (c) => {
    await d.edge.deleteSession(liveId(c), c.params.sessionId ?? '');
    sendEmpty(c.res);
  });

  // ---- files ----
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
    await d.edge.writeFile(sid, q.path, c.req, q.mode === undefined ? undefined : parseInt(q.mode, 8));
    sendEmpty(c.res);
  });
  on(ROUTES.readFile, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    await streamOut(c.res, 'application/octet-stream', await d.edge.readFile(liveId(c), q.path));
  });
  on(ROUTES.deleteFile, async (c) => {
    const q = query(c.url, api.DeleteFileQuery);
    await d.edge.remove(liveId(c), q.path, q.recursive ?? false);
    sendEmpty(c.res);
  });
  on(ROUTES.listFiles, async (c) => {
    const q = query(c.url, api.ListFilesQuery);
    sendJson(c.res, 200, { entries: await d.edge.list(liveId(c), q.path, q.depth ?? 1) });
  });
  on(ROUTES.statFile, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    sendJson(c.res, 200, await d.edge.stat(liveId(c), q.path));
  });
  on(ROUTES.mkdir, async (c) => {
    const sid = liveId(c);
    await d.edge.mkdir(sid, (await jsonBody(c.req, api.MkdirRequest)).path);
    sendEmpty(c.res);
  });
  on(ROUTES.move, async (c) => {
    const sid = liveId(c);
    const body = await jsonBody(c.req, api.MoveRequest);
    await d.edge.move(sid, body.from, body.to);
    sendEmpty(c.res);
  });
  on(ROUTES.putArchive, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    const sid = liveId(c);
    checkLength(c.req);
    await d.edge.putArchive(sid, q.path, c.req);
    sendEmpty(c.res);
  });
  on(ROUTES.getArchive, async (c) => {
    const q = query(c.url, api.FilePathQuery);
    await streamOut(c.res, 'application/x-tar', await d.edge.getArchive(liveId(c), q.path));
  });

  // ---- images and operations ----
  on(ROUTES.listImages, async (c) => sendJson(c.res, 200, { images: d.layers.listImages() }));
  on(ROUTES.listNodes, async (c) => {
    const cap = d.edge.capacity();
    const u = d.edge.usage();
    sendJson(c.res, 200, {
      nodes: [
        {
          id: d.edge.nodeId,
          address: d.nodeAddress(),
          state: 'ready',
          capacity: { cpu: cap.cpu, memoryMiB: cap.memoryMiB, sandboxes: cap.sandboxes },
          allocated: { cpu: u.cpu, memoryMiB: u.memoryMiB },
          sandboxes: u.sandboxes,
          lastHeartbeatAt: new Date().toISOString(),
        },
      ],
    });
  });
  on(ROUTES.createKey, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can create keys');
    const body = await jsonBody(c.req, api.CreateKeyRequest);
    const role = body.role ?? 'user';
    sendJson(c.res, 201, { key: d.auth.createKey(body.tenant, role, body.quota ?? {}), tenant: body.tenant, role });
  });
  on(ROUTES.info, async (c) =>
    sendJson(c.res, 200, {
      version: d.version,
      backends: [
        { name: 'container', available: true, accelerator: null },
        { name: 'microvm', available: false, accelerator: null },
        { name: 'vm', available: false, accelerator: null },
      ],
      e2b: { apiUrl: null, sandboxUrl: null },
    }),
  );
  router.add(ROUTES.openapi, async (c) => {
    c.res.writeHead(200, { 'content-type': 'application/json' });
    c.res.end(openapi);
  });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    metrics.requests++;
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname === '/healthz') return sendJson(res, 200, { ok: true });
    if (url.pathname === '/metrics') {
      const u = d.edge.usage();
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(
        `# TYPE warren_http_requests_total counter\nwarren_http_requests_total ${metrics.requests}\n` +
          `# TYPE warren_http_errors_total counter\nwarren_http_errors_total ${metrics.errors}\n` +
          `# TYPE warren_sandboxes gauge\nwarren_sandboxes ${u.sandboxes}\n` +
          `# TYPE warren_allocated_cpu gauge\nwarren_allocated_cpu ${u.cpu}\n` +
          `# TYPE warren_allocated_memory_mib gauge\nwarren_allocated_memory_mib ${u.memoryMiB}\n`,
      );
      return;
    }
    if (url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(
        '<!doctype html><title>Warren</title><h1>Warren</h1><p>API at <code>/v1</code>; contract at <a href="/v1/openapi.json">/v1/openapi.json</a>.</p>',
      );
      return;
    }
    const m = router.match(req.method ?? 'GET', url.pathname);
    if (m === null) throw new WarrenError('not_found', `no route ${req.method ?? ''} ${url.pathname}`);
    if (m === 'method') throw new WarrenError('invalid_argument', `method ${req.method ?? ''} is not allowed on ${url.pathname}`);
    await m.handler({ req, res, params: m.params, url });
  };

  return createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      metrics.errors++;
      if (!(err instanceof WarrenError)) d.logger.warn('request failed', { method: req.method, url: req.url, error: String(err), stack: (err as Error).stack });
      sendError(res, err);
      req.resume();
    });
  });
}
