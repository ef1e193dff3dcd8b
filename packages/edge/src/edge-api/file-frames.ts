import { createHash } from 'node:crypto';
import { WarrenError } from '@warren/api';
import type { EdgeFile } from './edge-api.js';
import { MAX_CALL_BYTES, decodeValue, encodeValue } from './wire.js';

/**
 * The body of a call whose last argument is a create's files (create, claim): a 4-byte
 * big-endian length and the JSON of the other arguments plus each file's path, mode, size and
 * sha256, then each file's bytes in order. Bytes travel raw (no base64), the sender writes the
 * caller's own buffers, and the receiver keeps one copy of content it already holds: a batch of
 * creates with the same files costs one copy at each end, not one per create.
 */
interface FileMeta {
  path: string;
  mode?: number;
  size: number;
  sha256: string;
}

const digests = new WeakMap<Buffer, string>();

/** A buffer's sha256 (computed once per buffer: a batch shares its files' buffers). */
function sha256(b: Buffer): string {
  let d = digests.get(b);
  if (d === undefined) digests.set(b, (d = createHash('sha256').update(b).digest('hex')));
  return d;
}

/** The parts of the body, in order (the caller's file buffers among them, not copied). */
export function encodeFileCall(args: unknown[], files: EdgeFile[]): Buffer[] {
  const meta: FileMeta[] = files.map((f) => ({ path: f.path, mode: f.mode, size: f.content.length, sha256: sha256(f.content) }));
  const json = Buffer.from(encodeValue([...args, meta]));
  if (json.length > MAX_CALL_BYTES) throw new WarrenError('payload_too_large', `an edge call is limited to ${MAX_CALL_BYTES} bytes`);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(json.length);
  return [len, json, ...files.map((f) => f.content)];
}

/**
 * Content the receiver holds, by sha256, for as long as something uses it. The digest only
 * finds a candidate: what arrives is compared byte for byte, so a wrong digest costs a copy,
 * never wrong content.
 */
export class ContentCache {
  private readonly held = new Map<string, WeakRef<Buffer>>();
  /** Content being received: a second call with the same waits for it (its bytes wait in the socket meanwhile). */
  private readonly arriving = new Map<string, Promise<Buffer | undefined>>();
  private readonly gone = new FinalizationRegistry<string>((key) => {
    if (this.held.get(key)?.deref() === undefined) this.held.delete(key);
  });

  /**
   * Held content with this digest and size (after the one arriving, if one is); when there is
   * none, the caller receives it and hands it over with `done` (undefined if it failed).
   */
  async find(sha: string, size: number): Promise<{ same: Buffer | undefined; done: (b: Buffer | undefined) => void }> {
    const key = `${sha}:${size}`;
    const coming = this.arriving.get(key);
    if (coming) await coming;
    const b = this.held.get(key)?.deref();
    if (b) return { same: b, done: () => undefined };
    let settle: (b: Buffer | undefined) => void = () => undefined;
    this.arriving.set(key, new Promise((resolve) => (settle = resolve)));
    return {
      same: undefined,
      done: (got) => {
        this.arriving.delete(key);
        if (got) {
          this.held.set(key, new WeakRef(got));
          this.gone.register(got, key);
        }
        settle(got);
      },
    };
  }

  /** Content received that differs from what its digest named: held under that digest from now on. */
  replace(sha: string, b: Buffer): void {
    const key = `${sha}:${b.length}`;
    this.held.set(key, new WeakRef(b));
    this.gone.register(b, key);
  }
}

/** Reads exact byte counts from a stream of chunks. */
class ChunkReader {
  private buf: Buffer = Buffer.alloc(0);
  private readonly it: AsyncIterator<Buffer>;

  constructor(src: AsyncIterable<Buffer>) {
    this.it = src[Symbol.asyncIterator]();
  }

  /** The next chunk of at most `max` bytes (what is buffered first); null at the end. */
  async chunk(max: number): Promise<Buffer | null> {
    if (this.buf.length === 0) {
      const r = await this.it.next();
      if (r.done) return null;
      this.buf = r.value;
    }
    const out = this.buf.subarray(0, max);
    this.buf = this.buf.subarray(out.length);
    return out;
  }

  async exactly(n: number): Promise<Buffer> {
    const parts: Buffer[] = [];
    let got = 0;
    while (got < n) {
      const c = await this.chunk(n - got);
      if (!c) throw new WarrenError('invalid_argument', 'an edge call ended before its files did');
      parts.push(c);
      got += c.length;
    }
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, n);
  }

  /**
   * `n` bytes: `same` itself when they equal it (nothing else is kept), else a buffer of their own
   * (what matched so far copied from `same`).
   */
  async into(n: number, same: Buffer | undefined): Promise<{ content: Buffer; reused: boolean }> {
    let own: Buffer | null = same ? null : Buffer.allocUnsafe(n);
    let got = 0;
    while (got < n) {
      const c = await this.chunk(n - got);
      if (!c) throw new WarrenError('invalid_argument', 'an edge call ended before its files did');
      if (!own && same && !c.equals(same.subarray(got, got + c.length))) {
        own = Buffer.allocUnsafe(n);
        same.copy(own, 0, 0, got);
      }
      if (own) c.copy(own, got);
      got += c.length;
    }
    return own ? { content: own, reused: false } : { content: same!, reused: true };
  }
}

/** The arguments of a file call, its files last (see encodeFileCall), reading no more than it announced. */
export async function decodeFileCall(body: AsyncIterable<Buffer>, cache: ContentCache, maxFileBytes: number): Promise<unknown[]> {
  const r = new ChunkReader(body);
  const len = (await r.exactly(4)).readUInt32BE(0);
  if (len > MAX_CALL_BYTES) throw new WarrenError('payload_too_large', `an edge call is limited to ${MAX_CALL_BYTES} bytes`);
  const args: unknown = decodeValue((await r.exactly(len)).toString('utf8'));
  if (!Array.isArray(args) || !Array.isArray(args[args.length - 1])) throw new WarrenError('invalid_argument', 'a file call ends with its files');
  const rest = args as unknown[];
  const meta = rest.pop() as FileMeta[];
  const files: EdgeFile[] = [];
  for (const m of meta) {
    if (!Number.isSafeInteger(m.size) || m.size < 0 || m.size > maxFileBytes)
      throw new WarrenError('payload_too_large', `a file is limited to ${maxFileBytes} bytes`);
    const found = await cache.find(m.sha256, m.size);
    let content: Buffer;
    try {
      const got = await r.into(m.size, found.same);
      content = got.content;
      if (found.same && !got.reused) cache.replace(m.sha256, content);
    } catch (e) {
      found.done(undefined);
      throw e;
    }
    found.done(content);
    files.push({ path: m.path, content, ...(m.mode === undefined ? {} : { mode: m.mode }) });
  }
  if (await r.chunk(1)) throw new WarrenError('invalid_argument', 'an edge call has more bytes than its files');
  return [...rest, files];
}
