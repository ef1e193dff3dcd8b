import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { rootCertificates } from 'node:tls';
import { WarrenError, parseError, routePath, wsAccept, wsKey, type PathParamNames, type PathParams, type RouteSpec, type z } from '@warren/api';
import { isStream, nodeHttp, type Body, type HttpResponse, type HttpSend } from './node-http.js';
import { Http1Pool } from './http1/pool.js';
import type { WholeAnswer } from './http1/response-parser.js';

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** Base URL, e.g. http://127.0.0.1:7070 */
  url: string;
  apiKey: string;
  /** Injected for tests, proxies and other runtimes; without it Node's own HTTP client is used. */
  fetch?: FetchLike;
  /**
   * For an `https:` URL: certificates (PEM) to trust besides Node's own CA list (and
   * NODE_EXTRA_CA_CERTS's), e.g. a private CA's. Not used with an injected `fetch`.
   */
  ca?: string | string[];
}

/** A value a query string can carry (an array repeats its key). */
type QueryValue = string | number | boolean | string[] | undefined;
type QueryValues = Record<string, QueryValue>;

/** What every request may add: an Accept header, a raw body's content type, a signal to abort it. */
interface CommonOptions {
  /** Content type of a raw body (default application/octet-stream). */
  contentType?: string;
  accept?: string;
  signal?: AbortSignal;
}

/**
 * A query as the client writes it from the route's schema: a field zod coerces (its input is
 * `unknown`, e.g. `limit`) is sent as a number or a string; every other field as the schema takes
 * it, as far as a query string can carry it.
 */
type WireQuery<Q> = { [K in keyof Q]: unknown extends Q[K] ? number | string | undefined : Extract<Q[K], QueryValue> };

/**
 * A request's options, typed by its route in the contract: `query` only where the route has a
 * query schema (as its input), `json` only where it has a body schema, `body` only where it takes
 * a raw body. A route's wider spec (`RouteSpec`, not one of ROUTES) takes anything.
 */
export type RequestOptions<S extends RouteSpec = RouteSpec> = CommonOptions & {
  query?: S['query'] extends z.ZodType ? WireQuery<z.input<S['query']>> : never;
  json?: S['body'] extends z.ZodType ? z.input<S['body']> : never;
  body?: S['rawBody'] extends string ? Body : never;
};

/** The untyped options the transport itself handles, whatever the route. */
interface AnyRequestOptions extends CommonOptions {
  query?: QueryValues;
  json?: unknown;
  body?: Body;
}

/**
 * The path parameters and options of a call on route S: the parameters are required when its
 * path has `{name}` segments (exactly those names) and may be left out when it has none (then
 * only `{}` is taken: a parameter the path does not have is a mistake).
 */
export type RouteArgs<S extends RouteSpec> = [PathParamNames<S['path']>] extends [never]
  ? [params?: Record<string, never>, options?: RequestOptions<S>]
  : [params: PathParams<S['path']>, options?: RequestOptions<S>];

/** What a route answers, by its own schema in the route table (none: nothing the client reads). */
export type RouteResponse<S extends RouteSpec> = S['response'] extends z.ZodType ? z.infer<S['response']> : unknown;

/**
 * One HTTP round trip to the Warren API; non-2xx answers become the server's WarrenError. Every
 * call names its route in the contract's table (ROUTES): the method, the path and the answer's
 * type come from there, as the server's validation and the OpenAPI document do.
 */
export class Transport {
  private readonly base: string;
  private readonly send: HttpSend;
  /** HTTP or HTTPS without an injected fetch: answers read whole go over kept connections of our own (`Http1Pool`). */
  private readonly whole: { pool: Http1Pool; prefix: string } | null;

  /** What TLS trusts: Node's CA list and `ca` (Node's `ca` option alone would replace the list); undefined: the default. */
  private readonly trust: string[] | undefined;

  constructor(private readonly o: ClientOptions) {
    this.base = o.url.replace(/\/+$/, '');
    this.trust = o.ca === undefined ? undefined : [...tlsDefaultCas(), ...[o.ca].flat()];
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
      : nodeHttp({ ca: this.trust });
    this.whole = f ? null : http1For(this.base, this.trust);
  }

  /** The URL of a path on this server with a query (a field left undefined is left out; an array repeats its key). */
  url(path: string, query?: QueryValues): string {
    return `${this.base}${path}${queryString(query)}`;
  }

  /** One call on a route: its path filled from `params`, its query, JSON or raw body as the route takes them. */
  async request<S extends RouteSpec>(spec: S, ...[params, options]: RouteArgs<S>): Promise<HttpResponse> {
    return this.roundTrip(spec, params, options ?? {}, false);
  }

  /**
   * The round trip itself, once the route's types have checked the call (`spec` known only as a
   * RouteSpec from here). `whole`: the caller reads the answer whole (not as a stream).
   */
  private async roundTrip(spec: RouteSpec, params: PathParams<string> = {}, ro: AnyRequestOptions, whole: boolean): Promise<HttpResponse> {
    const { method } = spec;
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
      const lean = whole ? this.whole : null;
      if (lean && !isStream(body))
        res = wholeResponse(await lean.pool.request(method, `${lean.prefix}${path}${queryString(ro.query)}`, headers, body, ro.signal));
      else res = await this.send(this.url(path, ro.query), { method, headers, body, signal: ro.signal });
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

  /** A call whose answer is the route's JSON response. */
  async json<S extends RouteSpec>(spec: S, ...[params, options]: RouteArgs<S>): Promise<RouteResponse<S>> {
    const res = await this.roundTrip(spec, params, { accept: 'application/json', ...options }, true);
    return (await res.json()) as RouteResponse<S>;
  }

  /** A call whose answer has no body the client reads. */
  async empty<S extends RouteSpec>(spec: S, ...[params, options]: RouteArgs<S>): Promise<void> {
    const res = await this.roundTrip(spec, params, options ?? {}, true);
    await res.arrayBuffer();
  }

  /** A call whose answer is bytes, read whole. */
  async bytes<S extends RouteSpec>(spec: S, ...[params, options]: RouteArgs<S>): Promise<Uint8Array> {
    const res = await this.roundTrip(spec, params, options ?? {}, true);
    return res.bytes ? res.bytes() : new Uint8Array(await res.arrayBuffer());
  }
  /**
   * Opens a WebSocket on a route (always through Node's own HTTP client): the socket after the
   * handshake, the bytes that came with it, and the answer's headers. A refusal is the server's
   * WarrenError.
   */
  upgrade<S extends RouteSpec>(
    spec: S,
    params: PathParams<S['path']>,
    query?: RequestOptions<S>['query'],
  ): Promise<{ socket: Socket; head: Buffer; headers: Record<string, string | string[] | undefined> }> {
    const url = new URL(this.url(routePath(spec, params), query));
    const key = wsKey();
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
      method: 'GET',
      ...(this.trust !== undefined ? { ca: this.trust } : {}),
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

/** A query string (with its `?`; empty without fields): a field left undefined is left out, an array repeats its key. */
function queryString(query: QueryValues | undefined): string {
  if (!query) return '';
  const qs = new URLSearchParams();
  for (const k in query) {
    const v = query[k];
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) qs.append(k, x);
    else qs.append(k, String(v));
  }
  const s = qs.toString();
  return s ? `?${s}` : '';
}

/**
 * The CAs TLS trusts by default: Node's own list and the file NODE_EXTRA_CA_CERTS names (Node
 * reads it at start; a `ca` given to a connection replaces both, so both are given with it).
 */
function tlsDefaultCas(): string[] {
  const extra = process.env.NODE_EXTRA_CA_CERTS;
  let more: string[] = [];
  if (extra) {
    try {
      more = [readFileSync(extra, 'utf8')];
    } catch {
      // Node warns of an unreadable file at start and goes on without it: so does this.
    }
  }
  return [...rootCertificates, ...more];
}

/** Kept connections of our own to the server (HTTP or HTTPS), and the path its base URL puts before every route; null: not such a URL. */
function http1For(base: string, ca: ClientOptions['ca']): { pool: Http1Pool; prefix: string } | null {
  let u: URL;
  try {
    u = new URL(base);
  } catch {
    return null; // not a URL: every call fails as unavailable, as through Node's client
  }
  const secure = u.protocol === 'https:';
  if (!secure && u.protocol !== 'http:') return null;
  // An IPv6 literal is named in brackets in a URL, bare to connect().
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  const port = Number(u.port || (secure ? 443 : 80));
  return { pool: new Http1Pool({ host, port, hostHeader: u.host, ...(secure ? { tls: { ca } } : {}) }), prefix: u.pathname.replace(/\/+$/, '') };
}

/** A whole answer as the SDK reads responses. */
function wholeResponse(a: WholeAnswer): HttpResponse {
  const b = a.body;
  return {
    status: a.status,
    ok: a.status >= 200 && a.status < 300,
    text: () => Promise.resolve(b.toString('utf8')),
    json: () => Promise.resolve(JSON.parse(b.toString('utf8')) as unknown),
    arrayBuffer: () => Promise.resolve(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer),
    // A body that owns its memory whole (a large one, joined from its parts) is handed over as it
    // is; one that shares it (with the answer's head, or Node's pool of small buffers) is copied.
    bytes: () => Promise.resolve(b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? new Uint8Array(b.buffer) : new Uint8Array(b)),
    // Made only if a caller iterates it (a call reading JSON never does).
    body: {
      async *[Symbol.asyncIterator]() {
        if (b.length) yield b;
      },
    },
  };
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
