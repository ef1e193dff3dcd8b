import { createHash, type Hash } from 'node:crypto';
import { WarrenError } from '@warren/api';

/** One tar member, as the layer code needs it (PAX and GNU long names already applied). */
export interface TarEntry {
  path: string;
  type: 'file' | 'link' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo';
  mode: number;
  uid: number;
  gid: number;
  /** Bytes of its body: 0 for every type but a file. */
  size: number;
  mtime: number;
  linkname: string;
  devmajor: number;
  devminor: number;
  /** Extended attributes from PAX records (SCHILY.xattr.* / LIBARCHIVE.xattr.*). */
  xattrs: ReadonlyMap<string, Buffer>;
  /** Where the member's body starts in the (uncompressed) stream. */
  offset: number;
}

const BLOCK = 512;
/** The largest extended header (PAX records, a GNU long name) read whole into memory. */
export const MAX_EXTENDED_HEADER_BYTES = 16 << 20;
/** The most extended attributes one member may carry (Linux keeps them in one block anyway). */
export const MAX_XATTRS = 1024;
/** The largest piece of a member's body handed on at once. */
const BODY_CHUNK = 1 << 20;
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

/**
 * Reads exact byte counts from a stream of chunks, hashing everything it passes on. Chunks are
 * kept as they come and joined once per read, so a read of n bytes costs one copy of them, not one
 * per chunk; it holds at most what the largest read asks for plus one chunk. Every read takes at
 * least one byte or throws: no caller can loop on it without the stream moving.
 */
class ByteReader {
  private readonly parts: Buffer[] = [];
  private have = 0;
  private done = false;
  readonly hash: Hash = createHash('sha256');
  bytes = 0;

  /** Bytes handed out so far: the stream position of the next read. */
  get position(): number {
    return this.bytes - this.have;
  }

  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.have < n && !this.done) {
      const r = await this.it.next();
      if (r.done) {
        this.done = true;
        break;
      }
      const chunk = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value);
      if (chunk.length === 0) continue;
      this.hash.update(chunk);
      this.bytes += chunk.length;
      this.parts.push(chunk);
      this.have += chunk.length;
    }
    return this.have >= n;
  }

  /** The next n bytes held (there are at least n), in one buffer. */
  private take(n: number): Buffer {
    this.have -= n;
    const first = this.parts[0]!;
    if (first.length >= n) {
      if (first.length === n) this.parts.shift();
      else this.parts[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    // Whole parts used are dropped once at the end: a shift() each would copy the array of
    // parts every time (a 1 MiB header in 100k small chunks: minutes on the event loop).
    const out = Buffer.allocUnsafe(n);
    let used = 0;
    for (let got = 0; got < n; ) {
      const p = this.parts[used]!;
      const k = Math.min(p.length, n - got);
      p.copy(out, got, 0, k);
      got += k;
      if (k === p.length) used++;
      else this.parts[used] = p.subarray(k);
    }
    this.parts.splice(0, used);
    return out;
  }

  /** Exactly n bytes (n >= 1), or null at a clean end of stream (nothing buffered). */
  async read(n: number): Promise<Buffer | null> {
    atLeastOne(n);
    if (!(await this.fill(n))) {
      if (this.have === 0) return null;
      throw corrupt('it ends in the middle of an entry (truncated?)');
    }
    return this.take(n);
  }

  /** 1 to max bytes (max >= 1), for streaming a member's body: never joins chunks. */
  async chunk(max: number): Promise<Buffer> {
    atLeastOne(max);
    if (!(await this.fill(1))) throw corrupt('it ends in the middle of an entry (truncated?)');
    return this.take(Math.min(max, this.parts[0]!.length));
  }

  /** Passes over n bytes (n >= 0) without holding them. */
  async skip(n: number): Promise<void> {
    for (let left = n; left > 0; ) left -= (await this.chunk(Math.min(left, BODY_CHUNK))).length;
  }

  /** Reads (and hashes) whatever follows the archive's end marker. */
  async drain(): Promise<void> {
    this.parts.length = 0;
    this.have = 0;
    while (await this.fill(1)) {
      this.parts.length = 0;
      this.have = 0;
    }
  }
}

/** A read size is a whole number of bytes, at least one: anything else would never move the stream. */
function atLeastOne(n: number): void {
  if (!Number.isSafeInteger(n) || n < 1) throw new WarrenError('internal', `the tar reader was asked for ${n} bytes`);
}

function cstr(b: Buffer): string {
  const z = b.indexOf(0);
  return (z < 0 ? b : b.subarray(0, z)).toString('utf8');
}

/** A numeric header field: octal digits (space or NUL ended), or GNU base-256 when its high bit is set. */
function num(b: Buffer, what: string): number {
  if ((b[0] ?? 0) & 0x80) {
    // Negative base-256 values (0xff lead) are never valid here: no field we read can be below 0.
    if ((b[0] ?? 0) & 0x40) throw corrupt(`${what} is negative`);
    let v = BigInt((b[0] ?? 0) & 0x3f);
    for (let i = 1; i < b.length; i++) v = (v << 8n) | BigInt(b[i] ?? 0);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw corrupt(`${what} is too large`);
    return Number(v);
  }
  const s = cstr(b).trim();
  if (s === '') return 0;
  if (!/^[0-7]+$/.test(s)) throw corrupt(`${what} is not an octal number`);
  const v = parseInt(s, 8);
  if (!Number.isSafeInteger(v)) throw corrupt(`${what} is too large`);
  return v;
}

function checksumOk(h: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : (h[i] ?? 0);
  return sum === num(h.subarray(148, 156), 'checksum');
}

/** A PAX integer (size, uid, gid): decimal digits only, within what a Number holds exactly. */
function paxInt(v: Buffer, key: string): number {
  const s = v.toString('latin1');
  const n = Number(s);
  if (!/^[0-9]+$/.test(s) || !Number.isSafeInteger(n)) throw corrupt(`PAX ${key}=${s.slice(0, 40)} is not a whole number of at most 2^53`);
  return n;
}

/** A PAX time (mtime): decimal seconds, maybe negative, maybe with a fraction (dropped). */
function paxTime(v: Buffer, key: string): number {
  const s = v.toString('latin1');
  const m = /^(-?[0-9]+)(\.[0-9]*)?$/.exec(s);
  const n = m ? Number(m[1]) : NaN;
  if (!Number.isSafeInteger(n)) throw corrupt(`PAX ${key}=${s.slice(0, 40)} is not a time in seconds`);
  return s.startsWith('-') && /[1-9]/.test(m?.[2] ?? '') ? n - 1 : n;
}

/** What PAX records say that a layer uses: numbers checked, extended attributes decoded. */
interface Pax {
  path?: string;
  linkpath?: string;
  size?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  xattrs: ReadonlyMap<string, Buffer>;
}

const NO_PAX: Pax = { xattrs: new Map() };

/**
 * PAX extended header records, "LEN key=value\n", over `base` (the global header's so far). Only
 * what a layer uses is kept (a `comment` of megabytes is not), so merging headers costs at most
 * {@link MAX_XATTRS} per header, whatever the records held.
 */
function parsePax(data: Buffer, base: Pax): Pax {
  const out: Pax = { ...base };
  let xattrs: Map<string, Buffer> | null = null;
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0 && data.subarray(off).every((b) => b === 0)) break; // NUL padding after the last record
    const lenText = sp < 0 ? '' : data.toString('latin1', off, sp);
    const len = Number(lenText);
    if (!/^[0-9]{1,8}$/.test(lenText) || len <= sp - off + 1 || off + len > data.length || data[off + len - 1] !== 0x0a) throw corrupt('bad PAX record');
    const rec = data.subarray(sp + 1, off + len - 1);
    off += len;
    const eq = rec.indexOf(0x3d);
    if (eq < 0) throw corrupt('bad PAX record');
    const key = rec.subarray(0, eq).toString('utf8');
    const value = rec.subarray(eq + 1);
    if (key === 'path' || key === 'linkpath') out[key] = value.toString('utf8');
    else if (key === 'size' || key === 'uid' || key === 'gid') out[key] = paxInt(value, key);
    else if (key === 'mtime') out.mtime = paxTime(value, key);
    else if (key.startsWith('SCHILY.xattr.') || key.startsWith('LIBARCHIVE.xattr.')) {
      xattrs ??= new Map(base.xattrs);
      if (key.startsWith('SCHILY.xattr.')) xattrs.set(key.slice('SCHILY.xattr.'.length), value);
      else xattrs.set(libarchiveXattrName(key), Buffer.from(value.toString(), 'base64'));
      if (xattrs.size > MAX_XATTRS) throw corrupt(`more than ${MAX_XATTRS} extended attributes`);
    }
  }
  if (xattrs) out.xattrs = xattrs;
  return out;
}

function libarchiveXattrName(key: string): string {
  try {
    return decodeURIComponent(key.slice('LIBARCHIVE.xattr.'.length));
  } catch {
    throw corrupt(`PAX record ${key.slice(0, 80)} has a badly escaped name`);
  }
}

/**
 * Reads a tar stream (ustar, GNU and PAX), calling `onEntry` for each member with a reader of
 * its body that must be used up or left (the rest is skipped). Returns the sha256 of the whole
 * stream as it was read (a layer's diffID) and its size. Corrupt and truncated archives, numbers
 * that are not whole (a PAX `size=1.5`), members other than files that claim a body, and member
 * types a layer cannot hold are invalid_argument errors. What it holds in memory is bounded by
 * the largest extended header ({@link MAX_EXTENDED_HEADER_BYTES}) plus one chunk of the source,
 * whatever sizes the headers declare.
 */
export async function readTar(
  source: AsyncIterable<Buffer>,
  onEntry: (e: TarEntry, body: AsyncIterable<Buffer>) => Promise<void>,
): Promise<{ digest: string; bytes: number; entries: number }> {
  const r = new ByteReader(source[Symbol.asyncIterator]());
  let globalPax = NO_PAX;
  let pax: Pax | null = null;
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
    const headerSize = num(h.subarray(124, 136), 'size');
    if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
      // An extended header's own size is its header's: PAX records describe the next member only.
      if (headerSize > MAX_EXTENDED_HEADER_BYTES) throw corrupt(`an extended header is over ${MAX_EXTENDED_HEADER_BYTES} bytes`);
      const body = headerSize === 0 ? Buffer.alloc(0) : await r.read(Math.ceil(headerSize / BLOCK) * BLOCK);
      if (body === null) throw corrupt('truncated extended header');
      const data = body.subarray(0, headerSize);
      if (flag === 'x') pax = parsePax(data, globalPax);
      else if (flag === 'g') globalPax = parsePax(data, globalPax);
      else if (flag === 'L') longName = cstr(data);
      else longLink = cstr(data);
      continue;
    }
    const type = TYPES[flag];
    if (!type) throw new WarrenError('invalid_argument', `tar member type '${flag}' is not supported in a layer`);
    const p = pax ?? globalPax;
    const magic = h.subarray(257, 263).toString('latin1');
    const prefix = magic === 'ustar\0' ? cstr(h.subarray(345, 500)) : '';
    const rawName = cstr(h.subarray(0, 100));
    const path = p.path ?? longName ?? (prefix ? `${prefix}/${rawName}` : rawName);
    const size = p.size ?? headerSize;
    // Only a file has a body (GNU tar writes 0 for every other type): a "symlink" of 1 GiB is not read.
    if (type !== 'file' && size !== 0) throw corrupt(`member ${path.slice(0, 200)} is a ${type} and declares ${size} bytes of data`);
    const entry: TarEntry = {
      path,
      type,
      mode: num(h.subarray(100, 108), 'mode') & 0o7777,
      uid: p.uid ?? num(h.subarray(108, 116), 'uid'),
      gid: p.gid ?? num(h.subarray(116, 124), 'gid'),
      size,
      mtime: p.mtime ?? num(h.subarray(136, 148), 'mtime'),
      linkname: p.linkpath ?? longLink ?? cstr(h.subarray(157, 257)),
      devmajor: num(h.subarray(329, 337), 'devmajor'),
      devminor: num(h.subarray(337, 345), 'devminor'),
      xattrs: p.xattrs,
      offset: r.position,
    };
    pax = null;
    longName = longLink = null;
    entries++;
    let left = size;
    const body: AsyncIterable<Buffer> = {
      async *[Symbol.asyncIterator]() {
        while (left > 0) {
          const c = await r.chunk(Math.min(left, BODY_CHUNK));
          left -= c.length;
          yield c;
        }
      },
    };
    await onEntry(entry, body);
    // Whatever the handler left of the body, then the padding to the next block.
    await r.skip(left);
    left = 0;
    await r.skip((BLOCK - (size % BLOCK)) % BLOCK);
  }
  return { digest: `sha256:${r.hash.digest('hex')}`, bytes: r.bytes, entries };
}
