import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

/** The part of a response the SDK reads; fetch's Response has it, and so does {@link nodeHttp}'s. */
export interface HttpResponse {
  status: number;
  ok: boolean;
  text(): Promise<string>;
  json(): Promise<unknown>;
  arrayBuffer(): Promise<ArrayBuffer>;
  /** The body's bytes as a Uint8Array that views them alone, uncopied where the client can (newer fetch Responses have it too). */
  bytes?(): Promise<Uint8Array>;
  body: AsyncIterable<Uint8Array> | null;
}

/** A request body: bytes, or a stream of them (sent chunked). */
export type Body = string | Uint8Array | AsyncIterable<Uint8Array>;

export interface HttpRequest {
  method: string;
  headers: Record<string, string>;
  body?: Body;
  signal?: AbortSignal;
}

export function isStream(b: Body | undefined): b is AsyncIterable<Uint8Array> {
  return b !== undefined && typeof b !== 'string' && !(b instanceof Uint8Array);
}

export type HttpSend = (url: string, req: HttpRequest) => Promise<HttpResponse>;

async function readAll(res: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/**
 * HTTP over Node's own client with keep-alive connections: about a millisecond less per call
 * than the global fetch, which matters on the exec hot path.
 */
export function nodeHttp(o: { ca?: string | string[] } = {}): HttpSend {
  const agents = { http: new HttpAgent({ keepAlive: true, maxSockets: 256 }), https: new HttpsAgent({ keepAlive: true, maxSockets: 256, ca: o.ca }) };
  return (url, r) =>
    new Promise((resolve, reject) => {
      const u = new URL(url);
      const secure = u.protocol === 'https:';
      const headers: Record<string, string> = { ...r.headers };
      const body = r.body;
      if (body !== undefined && !isStream(body)) headers['content-length'] = String(Buffer.byteLength(body));
      const req = (secure ? httpsRequest : httpRequest)(
        u,
        { method: r.method, headers, agent: secure ? agents.https : agents.http, signal: r.signal },
        (res) => {
          const status = res.statusCode ?? 0;
          const take = (): Promise<Buffer> => readAll(res);
          resolve({
            status,
            ok: status >= 200 && status < 300,
            text: async () => (await take()).toString('utf8'),
            json: async () => JSON.parse((await take()).toString('utf8')) as unknown,
            arrayBuffer: async () => {
              const b = await take();
              return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) as ArrayBuffer;
            },
            body: res,
          });
        },
      );
      req.on('error', reject);
      if (!isStream(body)) req.end(body);
      else
        void (async () => {
          for await (const c of body) if (!req.write(c)) await new Promise((ok) => req.once('drain', ok));
          req.end();
        })().catch((e: unknown) => req.destroy(e as Error));
    });
}
