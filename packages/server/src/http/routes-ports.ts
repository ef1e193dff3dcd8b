import { request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { WarrenError } from '@warren/api';
import { splice } from '@warren/edge';
import type { RouteDeps } from './route-types.js';
import type { Caller } from '../services/sandboxes.js';
import { auditCall } from './audit-call.js';
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

/** A connection to a sandbox's port, and how its audit entry is written (once: its outcome). */
interface Opened {
  stream: Duplex;
  audit: (status: number, code: string | null) => void;
}

/**
 * `/v1/sandboxes/{id}/ports/{port}/...`: HTTP and WebSocket to a port of the sandbox, for the
 * caller whose key owns the sandbox. The sandbox's node dials the port (EdgeApi.openPort) and the
 * bytes come through its edge: this process never dials a node's addresses (a sandbox's address
 * is its node's own, and may mean another machine's sandbox or nothing here). Each connection is
 * an audit entry, as a call of the contract is: refused (with its error), or made (with the
 * sandbox's answer's status; 101 for an upgrade passed on).
 */
export class PortProxy {
  constructor(private readonly d: RouteDeps) {}

  private async open(req: IncomingMessage, id: string, port: number): Promise<Opened> {
    // The port, not the path inside the sandbox: an entry's size does not grow with the URL.
    const path = `/v1/sandboxes/${id}/ports/${port}`;
    let caller: Caller | null = null;
    const audit = (status: number, code: string | null): void =>
      auditCall(this.d.audit, { method: req.method ?? 'GET', path, caller, sandbox: id, status, code });
    try {
      caller = await this.d.auth.authenticate(req.headers.authorization);
      return { stream: (await this.d.sandboxes.openPort(caller, id, port)).stream, audit };
    } catch (e) {
      const err = e instanceof WarrenError ? e : new WarrenError('internal', 'internal error');
      audit(err.status, err.code);
      throw e;
    }
  }

  async http(req: IncomingMessage, res: ServerResponse, m: { id: string; port: number; path: string }): Promise<void> {
    const { stream, audit } = await this.open(req, m.id, m.port);
    await new Promise<void>((resolve) => {
      const up = request({
        // The one connection the node made: the request goes on it, never a new one.
        createConnection: () => stream,
        host: 'localhost',
        port: m.port,
        method: req.method,
        path: m.path,
        headers: forwardHeaders(req.headers, req.socket.remoteAddress),
        // No agent: with one (even `agent: false`'s own), `createConnection` is not asked.
      });
      // The stream comes paused (EdgeApi.openPort): it flows once the request reads it.
      up.once('socket', (s) => s.resume());
      up.on('response', (r) => {
        audit(r.statusCode ?? 502, null);
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
      up.on('error', () => {
        stream.destroy();
        if (!res.headersSent) {
          const err = new WarrenError('unavailable', `port ${m.port} in the sandbox closed the connection before it answered`, { port: m.port });
          audit(err.status, err.code);
          sendError(res, err);
        } else res.destroy();
        resolve();
      });
      // The caller gone first: so is the connection in the sandbox.
      res.once('close', () => {
        if (!res.writableFinished) up.destroy();
      });
      req.pipe(up);
    });
  }

  /** A WebSocket (or any) upgrade: the request goes on as is (minus the key), then bytes both ways. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, m: { id: string; port: number; path: string }): Promise<void> {
    const { stream, audit } = await this.open(req, m.id, m.port);
    audit(101, null);
    if (socket.destroyed) return void stream.destroy();
    const headers = forwardHeaders(req.headers, req.socket.remoteAddress);
    const lines = [
      `${req.method ?? 'GET'} ${m.path} HTTP/1.1`,
      `Host: localhost:${m.port}`,
      'Connection: Upgrade',
      `Upgrade: ${req.headers.upgrade ?? 'websocket'}`,
    ];
    for (const [k, v] of Object.entries(headers)) for (const x of Array.isArray(v) ? v : [v]) if (!/[\r\n]/.test(x)) lines.push(`${k}: ${x}`);
    stream.write(lines.join('\r\n') + '\r\n\r\n');
    if (head.length) stream.write(head);
    splice(socket, stream);
  }
}
