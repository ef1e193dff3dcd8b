import { Agent, request, type IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { WarrenError, parseError } from '@warren/api';
import type { ExecEvent } from '@warren/api';
import type { CommandStream, EdgeApi, EdgeFile } from './edge-api.js';
import { encodeFileCall } from './file-frames.js';
import type { EdgeEvent } from '../lifecycle/events.js';
import { pushIterable } from '../util/push-iterable.js';
import { BODY_ARG, EDGE_CALLS, EDGE_PATH, MAX_CALL_BYTES, collectBody, decodeValue, encodeValue, type EdgeCallName } from './wire.js';

export interface RemoteEdgeOptions {
  /** The edge's Unix socket; or `host` and `port`. */
  socketPath?: string;
  host?: string;
  port?: number;
  token: string;
  /** Connections kept open to the edge (default 64). */
  maxSockets?: number;
}

/** An EdgeApi reached over HTTP (see serveEdgeApi); `close()` of the API also drops its connections. */
export interface RemoteEdgeApi extends EdgeApi {
  /** Drops the kept-alive connections (the edge itself runs on). */
  disconnect(): void;
}

/** A whole answer. */
const readAll = (res: IncomingMessage, max: number): Promise<Buffer> =>
  collectBody(res, max, () => new WarrenError('internal', `an edge answer over ${max} bytes`));

/**
 * NDJSON lines of a response as values, until it ends; a reader that stops drops the response
 * at once (also while no line is coming), and a broken one ends the reading with `unavailable`.
 */
function lines<T>(open: () => Promise<IncomingMessage>): AsyncIterable<T> {
  return pushIterable<T>((push, end) => {
    let res: IncomingMessage | null = null;
    let stopped = false;
    open().then(
      (r) => {
        if (stopped) return void r.destroy();
        res = r;
        let rest = '';
        r.setEncoding('utf8');
        r.on('data', (c: string) => {
          rest += c;
          let i: number;
          while ((i = rest.indexOf('\n')) >= 0) {
            const line = rest.slice(0, i);
            rest = rest.slice(i + 1);
            if (line) push(JSON.parse(line) as T);
          }
        });
        r.once('end', () => end());
        r.once('close', () => end(r.complete ? undefined : new WarrenError('unavailable', 'the connection to the edge broke')));
      },
      (e: Error) => end(e),
    );
    return () => {
      stopped = true;
      res?.destroy();
    };
  });
}

/**
 * The client side of serveEdgeApi: every EdgeApi call as one HTTP request on kept-alive
 * connections. What a call throws on the edge, it throws here (the same WarrenError code,
 * message and details); a broken connection is `unavailable`.
 * @example
 * const edge = remoteEdgeApi({ socketPath: '/var/lib/warren/run/edge.sock', token });
 * await edge.info();
 */
export function remoteEdgeApi(o: RemoteEdgeOptions): RemoteEdgeApi {
  const agent = new Agent({ keepAlive: true, maxSockets: o.maxSockets ?? 64 });
  const auth = `Bearer ${o.token}`;

  const send = (name: EdgeCallName, body: Buffer | Readable, headers: Record<string, string> = {}): Promise<IncomingMessage> =>
    new Promise((resolve, reject) => {
      const req = request({
        agent,
        socketPath: o.socketPath,
        host: o.host,
        port: o.port,
        method: 'POST',
        path: EDGE_PATH + name,
        headers: { authorization: auth, 'content-type': 'application/json', ...headers },
      });
      req.once('response', (res) => {
        if (res.statusCode === 200) return resolve(res);
        readAll(res, 1 << 20).then(
          (b) => {
            let parsed: unknown = null;
            try {
              parsed = JSON.parse(b.toString('utf8'));
            } catch {
              // not an error body: the status says what it can
            }
            reject(parseError(res.statusCode ?? 500, parsed));
          },
          (e: unknown) => reject(new WarrenError('unavailable', 'the connection to the edge broke', {}, { cause: e })),
        );
      });
      req.once('error', (e) => reject(new WarrenError('unavailable', `the edge cannot be reached: ${e.message}`, {}, { cause: e })));
      if (Buffer.isBuffer(body)) req.end(body);
      else pipeline(body, req).catch((e: unknown) => req.destroy(e instanceof Error ? e : new Error(String(e))));
    });

  /** The arguments as JSON, without the trailing ones left out (JSON would make them null). */
  const argsJson = (args: unknown[]): Buffer => {
    let n = args.length;
    while (n > 0 && args[n - 1] === undefined) n--;
    const text = encodeValue(args.slice(0, n));
    if (text.length > MAX_CALL_BYTES) throw new WarrenError('payload_too_large', `an edge call is limited to ${MAX_CALL_BYTES} bytes`);
    return Buffer.from(text);
  };

  const unary = async (name: EdgeCallName, args: unknown[]): Promise<unknown> => {
    const res = await send(name, argsJson(args));
    const b = await readAll(res, MAX_CALL_BYTES * 2).catch((e: unknown) => {
      throw e instanceof WarrenError ? e : new WarrenError('unavailable', 'the connection to the edge broke', {}, { cause: e });
    });
    return (decodeValue(b.toString('utf8')) as { r: unknown }).r ?? undefined;
  };

  const api: Record<string, (...a: unknown[]) => unknown> = {};
  for (const [n, kind] of Object.entries(EDGE_CALLS)) {
    const name = n as EdgeCallName;
    if (kind === 'unary') api[name] = (...args) => unary(name, args);
    else if (kind === 'files')
      api[name] = async (...args) => {
        const files = (args[1] ?? []) as EdgeFile[];
        const res = await send(name, Readable.from(encodeFileCall([args[0]], files)), { 'content-type': 'application/octet-stream' });
        return (decodeValue((await readAll(res, MAX_CALL_BYTES)).toString('utf8')) as { r: unknown }).r;
      };
    else if (kind === 'body-in')
      api[name] = async (...args) => {
        const at = BODY_ARG[name] ?? args.length - 1;
        const body = args[at] as AsyncIterable<Uint8Array>;
        const rest = [...args.slice(0, at), ...args.slice(at + 1)];
        const res = await send(name, Readable.from(body), {
          'content-type': 'application/octet-stream',
          'x-edge-args': argsJson(rest).toString('base64url'),
        });
        await readAll(res, 1 << 20);
      };
    else if (kind === 'body-out') api[name] = async (...args): Promise<AsyncIterable<Buffer>> => send(name, argsJson(args));
    else if (kind === 'command')
      api[name] = async (...args): Promise<CommandStream> => {
        const res = await send(name, argsJson(args));
        return { commandId: String(res.headers['x-command-id'] ?? ''), events: lines<ExecEvent>(async () => res) };
      };
    else api[name] = (after?: unknown): AsyncIterable<EdgeEvent> => lines<EdgeEvent>(() => send('events', argsJson([after])));
  }
  const remote = api as unknown as RemoteEdgeApi;
  remote.disconnect = () => agent.destroy();
  return remote;
}
