import type { IncomingMessage, ServerResponse } from 'node:http';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { WarrenError } from '@warren/api';
import { sendJson } from '../../http/io.js';
import type { RouteDeps } from '../../http/route-types.js';
import { METADATA_PREFIX, absolute, entryInfo, type Agent, type Call } from './agent.js';
import { ConnectError } from './connect.js';
import { multipartParts } from './multipart.js';
import { ownersOf } from './owners.js';
import { userName } from './requests.js';

/** E2B's `filesystem.Filesystem` unary calls on Warren's files (WatchDir and the watchers: envd-watch.ts). */
export const FILESYSTEM: Record<string, Call> = {
  async Stat(d, a, msg) {
    const [e, owners] = await Promise.all([d.files.stat(a.caller, a.id, absolute(msg.path, a)), ownersOf(d, a)]);
    return { entry: entryInfo(e, owners) };
  },
  async ListDir(d, a, msg) {
    const depth = Math.min(Math.max(1, Number(msg.depth ?? 1) || 1), 64);
    const [entries, owners] = await Promise.all([d.files.list(a.caller, a.id, absolute(msg.path, a), depth), ownersOf(d, a)]);
    return { entries: entries.map((e) => entryInfo(e, owners)) };
  },
  async MakeDir(d, a, msg) {
    const path = absolute(msg.path, a);
    const there = await d.files.stat(a.caller, a.id, path).catch(() => null);
    if (there) throw new ConnectError('already_exists', `${path} exists`);
    await d.files.makeDir(a.caller, a.id, path);
    return { entry: entryInfo(await d.files.stat(a.caller, a.id, path), await ownersOf(d, a)) };
  },
  async Remove(d, a, msg) {
    // As envd's: a path that is not there is removed already.
    await d.files.remove(a.caller, a.id, absolute(msg.path, a), true).catch((e: unknown) => {
      if (!(e instanceof WarrenError && e.code === 'not_found')) throw e;
    });
    return {};
  },
  async Move(d, a, msg) {
    const to = absolute(msg.destination, a);
    await d.files.move(a.caller, a.id, absolute(msg.source, a), to);
    return { entry: entryInfo(await d.files.stat(a.caller, a.id, to), await ownersOf(d, a)) };
  },
};

/** The most a file's metadata may take (its keys with the attribute prefix, and values), and one key. */
const MAX_METADATA = 4096;
const MAX_METADATA_KEY = 246;

/**
 * An upload's metadata (pure): its `X-Metadata-<key>` headers, keys lowercased (the first of a
 * repeated one), keys and values printable ASCII, within envd's bounds; invalid_argument otherwise.
 */
export function uploadMetadata(headers: Record<string, string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  let size = 0;
  for (const [name, values] of Object.entries(headers)) {
    const m = /^x-metadata-(.*)$/i.exec(name);
    if (!m || !values?.length) continue;
    const key = m[1]!.toLowerCase();
    const value = values[0]!;
    if (!key || !/^[\x20-\x7e]+$/.test(key) || !/^[\x20-\x7e]*$/.test(value))
      throw new WarrenError('invalid_argument', `metadata ${JSON.stringify(key)}: keys and values are printable ASCII, keys not empty`);
    if (key.length > MAX_METADATA_KEY) throw new WarrenError('invalid_argument', `metadata ${key}: a key is at most ${MAX_METADATA_KEY} bytes`);
    size += METADATA_PREFIX.length + key.length + value.length;
    if (size > MAX_METADATA) throw new WarrenError('invalid_argument', `a file's metadata is at most ${MAX_METADATA} bytes`);
    out[key] = value;
  }
  return out;
}

/** What a write sends into the sandbox at once: small chunks (zlib's are 16 KiB) joined up to this. */
const WRITE_CHUNK = 1024 * 1024;

/**
 * A request body's bytes, in chunks of up to WRITE_CHUNK (each chunk is a frame to the sandbox's
 * agent: fewer is faster); a body cut off mid-way is invalid_argument (not Node's bare error).
 */
async function* bodyOf(src: AsyncIterable<Buffer>, what: string): AsyncGenerator<Buffer> {
  let held: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of src) {
      held.push(chunk);
      size += chunk.length;
      if (size >= WRITE_CHUNK) {
        yield held.length === 1 ? held[0]! : Buffer.concat(held, size);
        held = [];
        size = 0;
      }
    }
  } catch (e) {
    if (e instanceof WarrenError) throw e;
    throw new WarrenError('invalid_argument', `${what} was cut off or is corrupt`);
  }
  if (size) yield Buffer.concat(held, size);
}

/**
 * `GET /files?path=` reads a file, at the pace the client takes it; `POST /files?path=` writes one
 * (octet-stream) or several (multipart), gzipped or not, each streamed into the sandbox as it
 * arrives (bounded by the node's largest file, what Warren's own uploads are bounded by).
 */
export async function serveFiles(d: RouteDeps, a: Agent, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const named = url.searchParams.get('username');
  const user = named ? userName(named) : a.user;
  const path = url.searchParams.get('path');
  if (req.method === 'GET') {
    const body = await d.files.read(a.caller, a.id, absolute(path, a, user));
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    await pipeline(Readable.from(body), res).catch(() => res.destroy());
    return;
  }
  if (req.method !== 'POST') throw new WarrenError('invalid_argument', '/files takes GET or POST');
  const type = String(req.headers['content-type'] ?? '');
  const encoding = String(req.headers['content-encoding'] ?? 'identity').toLowerCase();
  if (encoding !== 'gzip' && encoding !== 'identity') throw new WarrenError('invalid_argument', `Content-Encoding ${encoding}: gzip or none`);
  const metadata = uploadMetadata(req.headersDistinct);
  // Inflated as it is read, off the event loop (zlib's stream), never whole.
  const gunzip = encoding === 'gzip' ? createGunzip() : null;
  if (gunzip) {
    req.pipe(gunzip);
    req.once('error', (e) => gunzip.destroy(e));
  }
  const body = bodyOf(gunzip ?? req, gunzip ? 'the gzip body' : 'the body');
  const written: string[] = [];
  // Each upload makes a file's metadata exactly its own (none: none), as envd's.
  const attrs = Object.fromEntries(Object.entries(metadata).map(([k, v]) => [METADATA_PREFIX + k, v]));
  const write = async (target: string, data: AsyncIterable<Buffer>): Promise<void> => {
    await d.files.write(a.caller, a.id, target, data);
    await d.files.setAttrs(a.caller, a.id, target, METADATA_PREFIX, attrs);
    written.push(target);
  };
  try {
    if (type.startsWith('multipart/form-data')) {
      for await (const part of multipartParts(body, type)) await write(absolute(part.filename ?? path ?? undefined, a, user), part.data);
    } else await write(absolute(path ?? undefined, a, user), body);
  } finally {
    gunzip?.destroy();
  }
  if (!written.length) throw new WarrenError('invalid_argument', 'no file in the upload');
  sendJson(
    res,
    200,
    written.map((p) => ({ name: posix.basename(p), type: 'file', path: p, ...(Object.keys(metadata).length ? { metadata } : {}) })),
  );
}
