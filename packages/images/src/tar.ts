import { createHash, type Hash } from 'node:crypto';
import { WarrenError } from '@warren/api';

/** One tar member, as the layer code needs it (PAX and GNU long names already applied). */
export interface TarEntry {
  path: string;
  type: 'file' | 'link' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo';
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  linkname: string;
  devmajor: number;
  devminor: number;
  /** Extended attributes from PAX records (SCHILY.xattr.* / LIBARCHIVE.xattr.*). */
  xattrs: Map<string, Buffer>;
  /** Where the member's body starts in the (uncompressed) stream. */
  offset: number;
}

const BLOCK = 512;
const TYPES: Record<string, TarEntry['type']> = {
  '0': 'file',
  '\0': 'file',
  '7': 'file',
  '1': 'link',
  '2': 'symlink',
  '3': 'char',
  '4': 'block',
  '5': 'dir',
  '6': 'fifo',
};

function corrupt(msg: string): WarrenError {
  return new WarrenError('invalid_argument', `not a valid tar archive: ${msg}`);
}

/** Reads exact byte counts from a stream of chunks, hashing everything it passes on. */
class ByteReader {
  private buf: Buffer = Buffer.alloc(0);
  private done = false;
  readonly hash: Hash = createHash('sha256');
  bytes = 0;

  /** Bytes handed out so far: the stream position of the next read. */
  get position(): number {
    return this.bytes - this.buf.length;
  }

  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else {
        const chunk = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value);
        this.hash.update(chunk);
        this.bytes += chunk.length;
        this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
      }
    }
    return this.buf.length >= n;
  }

  /** Exactly n bytes, or null at a clean end of stream (nothing buffered). */
  async read(n: number): Promise<Buffer | null> {
    if (!(await this.fill(n))) {
      if (this.buf.length === 0) return null;
      throw corrupt('it ends in the middle of an entry (truncated?)');
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Up to max bytes (at least 1), for streaming a member's body. */
  async chunk(max: number): Promise<Buffer> {
    if (!(await this.fill(1))) throw corrupt('it ends in the middle of an entry (truncated?)');
    const n = Math.min(max, this.buf.length);
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Reads (and hashes) whatever follows the archive's end marker. */
  async drain(): Promise<void> {
    this.buf = Buffer.alloc(0);
    while (await this.fill(1 << 20)) this.buf = Buffer.alloc(0);
    this.buf = Buffer.alloc(0);
  }
}

function cstr(b: Buffer): string {
  const z = b.indexOf(0);
  return (z < 0 ? b : b.subarray(0, z)).toString('utf8');
}

function num(b: Buffer, what: string): number {
  // GNU base-256 for values that do not fit in octal.
  if ((b[0] ?? 0) & 0x80) {
    let v = BigInt((b[0] ?? 0) & 0x7f);
    for (let i = 1; i < b.length; i++) v = (v << 8n) | BigInt(b[i] ?? 0);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw corrupt(`${what} is too large`);
    return Number(v);
  }
  const s = cstr(b).trim();
  if (s === '') return 0;
  if (!/^[0-7]+$/.test(s)) throw corrupt(`${what} is not an octal number`);
  return parseInt(s, 8);
}

function checksumOk(h: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : (h[i] ?? 0);
  return sum === num(h.subarray(148, 156), 'checksum');
}

/** PAX extended header records: "LEN key=value\n". */
function parsePax(data: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0) break;
    const len = Number(data.subarray(off, sp).toString('ascii'));
    if (!Number.isInteger(len) || len <= 0 || off + len > data.length) throw corrupt('bad PAX record');
    const rec = data.subarray(sp + 1, off + len - 1);
    const eq = rec.indexOf(0x3d);
    if (eq < 0) throw corrupt('bad PAX record');
    out.set(rec.subarray(0, eq).toString('utf8'), rec.subarray(eq + 1));
    off += len;
  }
  return out;
}

/**
 * Reads a tar stream (ustar, GNU and PAX), calling `onEntry` for each member with a reader of
 * its body that must be used up or left (the rest is skipped). Returns the sha256 of the whole
 * stream as it was read (a layer's diffID) and its size. Corrupt and truncated archives, and
 * member types a layer cannot hold, are errors.
 */
export async function readTar(
  source: AsyncIterable<Buffer>,
  onEntry: (e: TarEntry, body: AsyncIterable<Buffer>) => Promise<void>,
): Promise<{ digest: string; bytes: number; entries: number }> {
  const r = new ByteReader(source[Symbol.asyncIterator]());
  let globalPax = new Map<string, Buffer>();
  let pax = new Map<string, Buffer>();
  let longName: string | null = null;
  let longLink: string | null = null;
  let entries = 0;
  for (;;) {
    const h = await r.read(BLOCK);
    if (h === null) break; // no end marker: tolerated, as GNU tar does
    if (h.every((b) => b === 0)) {
      await r.drain();
      break;
    }
    if (!checksumOk(h)) throw corrupt('header checksum mismatch');
    const flag = String.fromCharCode(h[156] ?? 0);
    let size = num(h.subarray(124, 136), 'size');
    const paxSize = pax.get('size') ?? globalPax.get('size');
    if (paxSize) size = Number(paxSize.toString());
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
      if (size > 16 << 20) throw corrupt('an extended header is over 16 MiB');
      const data = (await r.read(padded)) ?? Buffer.alloc(0);
      if (data.length < padded) throw corrupt('truncated extended header');
      const body = data.subarray(0, size);
      if (flag === 'x') pax = parsePax(body);
      else if (flag === 'g') globalPax = new Map([...globalPax, ...parsePax(body)]);
      else if (flag === 'L') longName = cstr(body);
      else longLink = cstr(body);
      continue;
    }
    const type = TYPES[flag];
    if (!type) throw new WarrenError('invalid_argument', `tar member type '${flag}' is not supported in a layer`);
    const magic = h.subarray(257, 263).toString('latin1');
    const prefix = magic === 'ustar\0' ? cstr(h.subarray(345, 500)) : '';
    const rawName = cstr(h.subarray(0, 100));
    const get = (k: string): string | undefined => (pax.get(k) ?? globalPax.get(k))?.toString('utf8');
    const xattrs = new Map<string, Buffer>();
    for (const [k, v] of [...globalPax, ...pax]) {
      if (k.startsWith('SCHILY.xattr.')) xattrs.set(k.slice('SCHILY.xattr.'.length), v);
      else if (k.startsWith('LIBARCHIVE.xattr.')) xattrs.set(decodeURIComponent(k.slice('LIBARCHIVE.xattr.'.length)), Buffer.from(v.toString(), 'base64'));
    }
    const entry: TarEntry = {
      path: get('path') ?? longName ?? (prefix ? `${prefix}/${rawName}` : rawName),
      type,
      mode: num(h.subarray(100, 108), 'mode') & 0o7777,
      uid: Number(get('uid') ?? num(h.subarray(108, 116), 'uid')),
      gid: Number(get('gid') ?? num(h.subarray(116, 124), 'gid')),
      size: type === 'file' ? size : 0,
      mtime: Math.floor(Number(get('mtime') ?? num(h.subarray(136, 148), 'mtime'))),
      linkname: get('linkpath') ?? longLink ?? cstr(h.subarray(157, 257)),
      devmajor: num(h.subarray(329, 337), 'devmajor'),
      devminor: num(h.subarray(337, 345), 'devminor'),
      xattrs,
      offset: r.position,
    };
    pax = new Map();
    longName = longLink = null;
    entries++;
    let left = type === 'file' ? size : 0;
    const body: AsyncIterable<Buffer> = {
      async *[Symbol.asyncIterator]() {
        while (left > 0) {
          const c = await r.chunk(Math.min(left, 1 << 20));
          left -= c.length;
          yield c;
        }
      },
    };
    await onEntry(entry, body);
    // Whatever the handler left of the body, then the padding (of any member with a size).
    while (left > 0) left -= (await r.chunk(Math.min(left, 1 << 20))).length;
    const pad = padded - size + (type === 'file' ? 0 : size);
    if (pad > 0 && (await r.read(pad)) === null) throw corrupt('it ends in the middle of an entry (truncated?)');
  }
  return { digest: `sha256:${r.hash.digest('hex')}`, bytes: r.bytes, entries };
}
