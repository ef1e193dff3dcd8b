import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { WarrenError, parseError, wsAccept, wsKey, type RouteSpec, type z } from '@warren/api';
import { isStream, nodeHttp, type Body, type HttpResponse, type HttpSend } from './node-http.js';

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** Base URL, e.g. http://127.0.0.1:7070 */
  url: string;
  apiKey: string;
  /** Injected for tests, proxies and other runtimes; without it Node's own HTTP client is used. */
  fetch?: FetchLike;
}

export interface RequestOptions {
  query?: Record<string, string | number | boolean | string[] | undefined>;
  json?: unknown;
  body?: Body;
  /** Content type of a raw body (default application/octet-stream). */
  contentType?: string;
  accept?: string;
  signal?: AbortSignal;
}

/** What a route answers, by its own schema in the route table (none: nothing the client reads). */
export type RouteResponse<S extends RouteSpec> = S['response'] extends z.ZodType ? z.infer<S['response']> : unknown;

/** A route's path with its `{name}` segments filled in from `params`, each percent-encoded. */
export function routePath(spec: Pick<RouteSpec, 'path'>, params: Record<string, string> = {}): string {
  return spec.path.replace(/\{(\w+)\}/g, (_m, name: string) => {
    const v = params[name];
    if (v === undefined) throw new WarrenError('invalid_argument', `${spec.path} needs ${name}`);
    return encodeURIComponent(v);
  });
}

/**
 * One HTTP round trip to the Warren API; non-2xx answers become the server's WarrenError. Every
 * call names its route in the contract's table (ROUTES): the method, the path and the answer's
 * type come from there, as the server's validation and the OpenAPI document do.
 */
export class Transport {
  private readonly base: string;
  private readonly send: HttpSend;

  constructor(private readonly o: ClientOptions) {
    this.base = o.url.replace(/\/+$/, '');
    const f = o.fetch;
    this.send = f
      ? (url, r) =>
          f(url, {
            method: r.method,
            headers: r.headers,
            body: r.body as RequestInit['body'],
            signal: r.signal,
            ...(isStream(r.body) ? { duplex: 'half' } : {}),
          } as RequestInit) as Promise<HttpResponse>
      : nodeHttp();
  }

  url(path: string, query?: RequestOptions['query']): string {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined) continue;
      if (Array.isArray(v)) for (const x of v) qs.append(k, x);
      else qs.append(k, String(v));
    }
    const s = qs.toString();
    return `${this.base}${path}${s ? `?${s}` : ''}`;
  }

  async request(spec: RouteSpec, params: Record<string, string> = {}, ro: RequestOptions = {}): Promise<HttpResponse> {
    const method = spec.method;
    const path = routePath(spec, params);
    const headers: Record<string, string> = { authorization: `Bearer ${this.o.apiKey}` };
    if (ro.accept) headers.accept = ro.accept;
    let body = ro.body;
    if (ro.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(ro.json);
    } else if (body !== undefined) headers['content-type'] = ro.contentType ?? 'application/octet-stream';
    let res: HttpResponse;
    try {
      res = await this.send(this.url(path, ro.query), { method, headers, body, signal: ro.signal });
    } catch (e) {
      throw new WarrenError('unavailable', `cannot reach Warren at ${this.base}`, {}, { cause: e });
    }
    if (!res.ok) {
      const text = await res.text().catch(() => '');
      let parsed: unknown = null;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      throw parseError(res.status, parsed);
    }
    return res;
  }

  async json<S extends RouteSpec>(spec: S, params: Record<string, string> = {}, ro: RequestOptions = {}): Promise<RouteResponse<S>> {
    const res = await this.request(spec, params, { accept: 'application/json', ...ro });
    return (await res.json()) as RouteResponse<S>;
  }

  async empty(spec: RouteSpec, params: Record<string, string> = {}, ro: RequestOptions = {}): Promise<void> {
    const res = await this.request(spec, params, ro);
    await res.arrayBuffer();
  }
  /**
   * Opens a WebSocket on a route (always through Node's own HTTP client): the socket after the
   * handshake, the bytes that came with it, and the answer's headers. A refusal is the server's
   * WarrenError.
   */
  upgrade(
    spec: RouteSpec,
    params: Record<string, string>,
    query?: RequestOptions['query'],
  ): Promise<{ socket: Socket; head: Buffer; headers: Record<string, string | string[] | undefined> }> {
    const url = new URL(this.url(routePath(spec, params), query));
    const key = wsKey();
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
      method: 'GET',
      headers: {
        authorization: `Bearer ${this.o.apiKey}`,
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-key': key,
        'sec-websocket-version': '13',
      },
    });
    return new Promise((resolve, reject) => {
      req.once('upgrade', (res, socket, head) => {
        if (res.headers['sec-websocket-accept'] !== wsAccept(key)) {
          socket.destroy();
          reject(new WarrenError('unavailable', 'the server did not accept the WebSocket'));
        } else resolve({ socket, head, headers: res.headers });
      });
      req.once('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          let parsed: unknown = null;
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            /* not JSON */
          }
          reject(parseError(res.statusCode ?? 500, parsed));
        });
      });
      req.once('error', (e) => reject(new WarrenError('unavailable', `cannot reach Warren at ${this.base}`, {}, { cause: e })));
      req.end();
    });
  }
}

/** Splits a streamed body into parsed JSON lines. */
export async function* ndjson<T>(res: HttpResponse): AsyncGenerator<T> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.trim()) yield JSON.parse(line) as T;
    }
  }
  if (buf.trim()) yield JSON.parse(buf) as T;
}
