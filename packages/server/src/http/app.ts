import { imageRoutes } from './routes-images.js';
import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { ROUTES, WarrenError, buildOpenApi, serializeError, type RouteSpec } from '@warren/api';
import type { Duplex } from 'node:stream';
import { Router } from './router.js';
import { jsonBody, query, sendEmpty, sendError, sendJson } from './io.js';
import type { Authed, On, RouteDeps } from './route-types.js';
import type { Caller } from '../services/sandboxes.js';
import { sandboxRoutes } from './routes-sandboxes.js';
import { commandRoutes } from './routes-commands.js';
import { fileRoutes } from './routes-files.js';
import { displayRoutes } from './routes-display.js';
import { opsRoutes } from './routes-ops.js';
import { fnRoutes } from './routes-fn.js';
import { leaseRoutes } from './routes-leases.js';
import { eventRoutes } from './routes-events.js';
import { PortProxy, matchPortPath } from './routes-ports.js';
import { matchPtyPath, servePty } from './routes-pty.js';
import { auditCall } from './audit-call.js';
import { isRunCodePath, serveRunCode } from '../compat/sandboxfusion/serve.js';
import { E2B_PREFIX, serveE2b } from '../compat/e2b/index.js';
import { exposition } from './prometheus.js';
import { Dashboard } from './dashboard.js';

export type AppDeps = RouteDeps;

/** The routes the join token reaches (an edge's): the others answer it permission_denied. */
const NODE_ROUTES = new Set<RouteSpec>([ROUTES.joinNode, ROUTES.heartbeat, ROUTES.getBlob, ROUTES.listBlobs]);

/**
 * The API's HTTP server settings. No limit on the time a whole request may take (Node's default,
 * 300 s, cut off imports and uploads that take longer to send: they are bounded by their size);
 * its headers still must come within a minute.
 */
export const SERVER_OPTIONS: ServerOptions = { keepAliveTimeout: 65_000, requestTimeout: 0, headersTimeout: 60_000 };

/** A route's query, by its own schema (none: nothing). */
function routeQuery(spec: RouteSpec, url: URL): unknown {
  return spec.query ? query(url, spec.query) : undefined;
}

/** A route's JSON body, by its own schema and size limit (none: nothing is read). */
async function routeBody(spec: RouteSpec, req: IncomingMessage): Promise<unknown> {
  return spec.body ? jsonBody(req, spec.body, spec.maxBodyBytes) : undefined;
}

/** Each server's upgraded connections (terminals, proxied WebSockets): Node's server forgets them at the upgrade. */
const upgraded = new WeakMap<Server, Set<Duplex>>();

/**
 * Ends every connection of a server that is closing: its HTTP ones and its upgraded ones (a
 * terminal left open kept `close` waiting for as long as its client stayed).
 */
export function closeAllConnections(server: Server): void {
  server.closeAllConnections();
  for (const s of upgraded.get(server) ?? []) s.destroy();
}

/** Builds the HTTP server of the Warren API (routes from the contract, one error handler). */
export function createApp(d: AppDeps): Server {
  const router = new Router();
  const metrics = { requests: 0, errors: 0 };
  const openapi = JSON.stringify(buildOpenApi(d.version));

  const on: On = <S extends RouteSpec>(spec: S, h: (c: Authed<S>) => Promise<void>): void => {
    // A heartbeat a second from every node is not an audit entry.
    const mutating = spec.method !== 'GET' && (spec as RouteSpec) !== ROUTES.heartbeat;
    const forNodes = NODE_ROUTES.has(spec);
    router.add<S['path']>(spec, async (ctx) => {
      // The audit names the route's {id}, whatever the route (it reads the params untyped).
      const params: Partial<Record<string, string>> = ctx.params;
      let caller: Caller | null = null;
      const audit: { sandbox?: string } = {};
      try {
        caller = await d.auth.authenticate(ctx.req.headers.authorization, { node: forNodes });
        // Object.assign, not a spread with more keys after it: in this V8 that form costs ~7 µs a call.
        await h(
          Object.assign({}, ctx, {
            caller,
            audit,
            query: () => routeQuery(spec, ctx.url),
            body: () => routeBody(spec, ctx.req),
            reply: (body?: unknown) => (spec.status === 204 ? sendEmpty(ctx.res, 204) : sendJson(ctx.res, spec.status, body)),
          }) as Parameters<typeof h>[0],
        );
        if (mutating) record(ctx.url.pathname, ctx.req.method ?? '', caller, params.id ?? audit.sandbox, ctx.res.statusCode, null);
      } catch (e) {
        if (mutating) {
          const err = e instanceof WarrenError ? e : new WarrenError('internal', 'internal error');
          record(ctx.url.pathname, ctx.req.method ?? '', caller, params.id ?? audit.sandbox, err.status, err.code);
        }
        throw e;
      }
    });
  };
  const record = (path: string, method: string, caller: Caller | null, sandbox: string | undefined, status: number, code: string | null): void =>
    auditCall(d.audit, { method, path, caller, sandbox, status, code });
  sandboxRoutes(on, d);
  commandRoutes(on, d);
  fileRoutes(on, d);
  displayRoutes(on, d);
  opsRoutes(on, d);
  imageRoutes(on, d);
  fnRoutes(on, d);
  leaseRoutes(on, d);
  eventRoutes(on, d);
  router.add(ROUTES.openapi, async (c) => {
    c.res.writeHead(200, { 'content-type': 'application/json' });
    c.res.end(openapi);
  });

  const ports = new PortProxy(d);
  const dashboard = Dashboard.load();

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    metrics.requests++;
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname === '/healthz') return sendJson(res, 200, { ok: true });
    if (url.pathname === '/metrics') {
      // It names every tenant's sandboxes: an admin's (a scraper sends the key as a bearer token).
      if ((await d.auth.authenticate(req.headers.authorization)).role !== 'admin') throw new WarrenError('permission_denied', '/metrics needs an admin key');
      const nodes = await d.nodes.metrics();
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(
        exposition([
          `# TYPE warren_http_requests_total counter\nwarren_http_requests_total ${metrics.requests}\n` +
            `# TYPE warren_http_errors_total counter\nwarren_http_errors_total ${metrics.errors}\n`,
          await d.fn.metrics(),
          (await d.webhooks?.metrics()) ?? '',
          nodes,
        ]),
      );
      return;
    }
    if (dashboard?.serve(req, res, url.pathname)) return;
    if (url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(
        '<!doctype html><title>Warren</title><h1>Warren</h1><p>API at <code>/v1</code>; contract at <a href="/v1/openapi.json">/v1/openapi.json</a>. ' +
          'The dashboard is served here once built (<code>npm run build -w @warren/dashboard</code>).</p>',
      );
      return;
    }
    if (url.pathname.startsWith(E2B_PREFIX)) return serveE2b(d, req, res, url);
    if (isRunCodePath(url.pathname)) return serveRunCode(d, req, res, url);
    const port = matchPortPath(url);
    if (port) return ports.http(req, res, port);
    const m = router.match(req.method ?? 'GET', url.pathname);
    if (m === null) throw new WarrenError('not_found', `no route ${req.method ?? ''} ${url.pathname}`);
    if (m === 'method') throw new WarrenError('invalid_argument', `method ${req.method ?? ''} is not allowed on ${url.pathname}`);
    await m.handler({ req, res, params: m.params, url });
  };

  const server = createServer(SERVER_OPTIONS, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      metrics.errors++;
      if (!(err instanceof WarrenError)) d.logger.warn('request failed', { method: req.method, url: req.url, error: String(err), stack: (err as Error).stack });
      sendError(res, err);
      req.resume();
    });
  });
  // Upgrades (WebSocket) are served by the port proxy and the terminal.
  const open = new Set<Duplex>();
  upgraded.set(server, open);
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => undefined);
    open.add(socket);
    socket.once('close', () => open.delete(socket));
    const fail = (err: unknown): void => {
      const e = err instanceof WarrenError ? err : new WarrenError('internal', 'internal error');
      const body = JSON.stringify(serializeError(e).body);
      socket.end(
        `HTTP/1.1 ${e.status} ${e.code}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    try {
      const url = new URL(req.url ?? '/', 'http://localhost');
      const pty = matchPtyPath(url);
      if (pty !== null) {
        servePty(d, req, socket, head, pty, url).catch((e: unknown) => {
          metrics.errors++;
          if (!(e instanceof WarrenError)) d.logger.warn('terminal failed', { url: req.url, error: String(e) });
          fail(e);
        });
        return;
      }
      const m = matchPortPath(url);
      if (!m) return fail(new WarrenError('not_found', 'only /v1/sandboxes/{id}/pty and /v1/sandboxes/{id}/ports/{port}/... take an upgrade'));
      ports.upgrade(req, socket, head, m).catch(fail);
    } catch (e) {
      fail(e);
    }
  });
  return server;
}
