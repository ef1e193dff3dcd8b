import { request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { WarrenError } from '@warren/api';
import type { RouteDeps } from './route-types.js';
import { sendError } from './io.js';

const PORT_PATH = /^\/v1\/sandboxes\/([^/]+)\/ports\/([0-9]{1,5})(\/.*)?$/;

/** Headers that belong to one hop, and the caller's key, which the sandbox must never see. */
const DROP = new Set([
  'authorization',
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
]);

function forwardHeaders(h: IncomingHttpHeaders, from: string | undefined): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const listed = new Set(
    String(h.connection ?? '')
      .toLowerCase()
      .split(',')
      .map((x) => x.trim()),
  );
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !DROP.has(k) && !listed.has(k)) out[k] = v;
  if (h.host) out['x-forwarded-host'] = h.host;
  if (from) out['x-forwarded-for'] = from;
  return out;
}

/** Parses a port-proxy path: the sandbox, the port and the path (with query) inside. */
export function matchPortPath(url: URL): { id: string; port: number; path: string } | null {
  const m = PORT_PATH.exec(url.pathname);
  if (!m) return null;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) throw new WarrenError('invalid_argument', `port ${m[2]} is not a TCP port`);
  let id: string;
  try {
    id = decodeURIComponent(m[1]!);
  } catch {
    throw new WarrenError('invalid_argument', 'the sandbox id in the path is not valid percent-encoding');
  }
  return { id, port, path: (m[3] ?? '/') + url.search };
}

/**
 * `/v1/sandboxes/{id}/ports/{port}/...`: HTTP and WebSocket to a port on the sandbox's own
 * address, for the caller whose key owns the sandbox. Only the host reaches a sandbox this way
 * (the node's rules let nothing else in).
 */
export class PortProxy {
  constructor(private readonly d: RouteDeps) {}

  private async target(req: IncomingMessage, id: string, port: number): Promise<{ host: string; port: number }> {
    const caller = await this.d.auth.authenticate(req.headers.authorization);
    return { host: await this.d.sandboxes.portAddress(caller, id), port };
  }

  async http(req: IncomingMessage, res: ServerResponse, m: { id: string; port: number; path: string }): Promise<void> {
    const t = await this.target(req, m.id, m.port);
    await new Promise<void>((resolve) => {
      const up = request({
        host: t.host,
        port: t.port,
        method: req.method,
        path: m.path,
        headers: forwardHeaders(req.headers, req.socket.remoteAddress),
        agent: false,
      });
      up.on('response', (r) => {
        const headers: Record<string, string | string[]> = {};
        for (const [k, v] of Object.entries(r.headers)) if (v !== undefined && !DROP.has(k)) headers[k] = v;
        res.writeHead(r.statusCode ?? 502, headers);
        r.pipe(res);
        r.on('end', resolve);
        r.on('error', () => {
          res.destroy();
          resolve();
        });
      });
      up.on('error', (e: NodeJS.ErrnoException) => {
        if (!res.headersSent) sendError(res, unreachable(m.port, e));
        else res.destroy();
        resolve();
      });
      req.pipe(up);
    });
  }

  /** A WebSocket (or any) upgrade: the request goes on as is (minus the key), then bytes both ways. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, m: { id: string; port: number; path: string }): Promise<void> {
    const t = await this.target(req, m.id, m.port);
    const up = connect({ host: t.host, port: t.port });
    up.on('error', (e: NodeJS.ErrnoException) => {
      const err = unreachable(m.port, e);
      if (socket.writable)
        socket.end(
          `HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${JSON.stringify({ error: { code: err.code, message: err.message } })}`,
        );
    });
    socket.on('error', () => up.destroy());
    up.once('connect', () => {
      const headers = forwardHeaders(req.headers, req.socket.remoteAddress);
      const lines = [
        `${req.method ?? 'GET'} ${m.path} HTTP/1.1`,
        `Host: ${t.host}:${t.port}`,
        'Connection: Upgrade',
        `Upgrade: ${req.headers.upgrade ?? 'websocket'}`,
      ];
      for (const [k, v] of Object.entries(headers)) for (const x of Array.isArray(v) ? v : [v]) if (!/[\r\n]/.test(x)) lines.push(`${k}: ${x}`);
      up.write(lines.join('\r\n') + '\r\n\r\n');
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    up.on('close', () => socket.destroy());
    socket.on('close', () => up.destroy());
  }
}

function unreachable(port: number, e: NodeJS.ErrnoException): WarrenError {
  return new WarrenError(
    'unavailable',
    e.code === 'ECONNREFUSED' ? `nothing listens on port ${port} in the sandbox` : `port ${port} in the sandbox did not answer`,
    { port },
    { cause: e },
  );
}
