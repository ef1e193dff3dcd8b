import { WarrenError } from '@warren/api';

/** A part of a multipart body: its names, and its bytes as they arrive (read it to its end before the next part). */
export interface Part {
  name: string | null;
  filename: string | null;
  data: AsyncIterable<Buffer>;
}

/** At most this many parts in one upload. */
const MAX_PARTS = 1024;
/** The most a part's headers, or what precedes the first part, may take. */
const MAX_HEAD = 16 * 1024;

const bad = (why: string): WarrenError => new WarrenError('invalid_argument', `a malformed multipart body: ${why}`);

/**
 * The parts of a `multipart/form-data` body (RFC 7578) whose content type is `contentType` (it
 * names the boundary), read as the body arrives: what is held at once is a part's headers or a
 * chunk and a delimiter's length, whatever the body's size. A part's data must be read before
 * the next part is asked for (what is left of it is skipped then).
 */
export async function* multipartParts(body: AsyncIterable<Buffer>, contentType: string): AsyncGenerator<Part> {
  const m = /boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary) throw new WarrenError('invalid_argument', 'a multipart body without a boundary');
  const r = new Reader(body[Symbol.asyncIterator](), Buffer.from(`--${boundary}`));
  await r.skipPreamble();
  for (let n = 0; ; n++) {
    const head = await r.partHead();
    if (head === null) return;
    if (n >= MAX_PARTS) throw new WarrenError('invalid_argument', `more than ${MAX_PARTS} parts in one upload`);
    const disposition = /^content-disposition:(.*)$/im.exec(head)?.[1] ?? '';
    yield { name: param(disposition, 'name'), filename: param(disposition, 'filename'), data: r.partData() };
    await r.skipRest();
  }
}

/**
 * The body's bytes, a few at a time, and where they stand among the delimiters. The unread bytes
 * live in a buffer that grows by doubling, and a search starts where the last one stopped: a
 * client that sends a byte at a time costs linear time, not quadratic.
 */
class Reader {
  private store: Buffer = Buffer.alloc(0);
  private start = 0;
  private end = 0;
  private ended = false;
  /** Inside a part's data, which has not been read to its end. */
  private inData = false;
  /** CRLF and the delimiter: what ends a part's data. */
  private readonly marker: Buffer;

  constructor(
    private readonly it: AsyncIterator<Buffer>,
    private readonly delim: Buffer,
  ) {
    this.marker = Buffer.concat([Buffer.from('\r\n'), delim]);
  }

  /** The unread bytes (a view). */
  private get buf(): Buffer {
    return this.store.subarray(this.start, this.end);
  }

  private consume(n: number): void {
    this.start += n;
  }

  /** More bytes into the buffer; false at the body's end. */
  private async more(): Promise<boolean> {
    if (this.ended) return false;
    const r = await this.it.next();
    if (r.done) {
      this.ended = true;
      return false;
    }
    const chunk = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array);
    const held = this.end - this.start;
    if (this.end + chunk.length > this.store.length) {
      const next = held + chunk.length <= this.store.length / 2 ? this.store : Buffer.allocUnsafe(Math.max(2 * (held + chunk.length), 4096));
      this.store.copy(next, 0, this.start, this.end);
      this.store = next;
      this.start = 0;
      this.end = held;
    }
    chunk.copy(this.store, this.end);
    this.end += chunk.length;
    return true;
  }

  /** Where `what` is in the unread bytes, searching from `from` on; -1 if not there. */
  private find(what: Buffer | string, from: number): number {
    return this.buf.indexOf(what, Math.max(0, from));
  }

  /** Up to the first delimiter (a preamble is allowed, and bounded). */
  async skipPreamble(): Promise<void> {
    for (let from = 0; ; ) {
      const at = this.find(this.delim, from);
      if (at >= 0) return this.consume(at + this.delim.length);
      if (this.buf.length > MAX_HEAD) throw bad(`no delimiter in its first ${MAX_HEAD} bytes`);
      from = this.buf.length - this.delim.length + 1;
      if (!(await this.more())) throw new WarrenError('invalid_argument', 'a multipart body without its boundary');
    }
  }

  /** After a delimiter: the next part's headers, or null at the closing one. */
  async partHead(): Promise<string | null> {
    while (this.buf.length < 2) if (!(await this.more())) throw bad('cut short');
    if (this.buf[0] === 0x2d && this.buf[1] === 0x2d) return null;
    if (this.buf[0] !== 0x0d || this.buf[1] !== 0x0a) throw bad('no line end after a delimiter');
    for (let from = 0; ; ) {
      const end = this.find('\r\n\r\n', from);
      if (end >= 0) {
        const head = this.buf.subarray(2, end).toString('utf8');
        this.consume(end + 4);
        this.inData = true;
        return head;
      }
      if (this.buf.length > MAX_HEAD) throw bad(`part headers longer than ${MAX_HEAD} bytes`);
      from = this.buf.length - 3;
      if (!(await this.more())) throw bad('a part without its headers’ end');
    }
  }

  /** The current part's bytes, up to the CRLF before the next delimiter (which is consumed). */
  async *partData(): AsyncGenerator<Buffer> {
    while (this.inData) {
      const at = this.find(this.marker, 0);
      if (at >= 0) {
        // A copy: the buffer's bytes are reused once consumed.
        const last = Buffer.from(this.buf.subarray(0, at));
        this.consume(at + this.marker.length);
        this.inData = false;
        if (last.length) yield last;
        return;
      }
      // All but what could be the start of the marker is the part's for sure.
      const safe = this.buf.length - (this.marker.length - 1);
      if (safe > 0) {
        const out = Buffer.from(this.buf.subarray(0, safe));
        this.consume(safe);
        yield out;
      } else if (!(await this.more())) throw bad('cut short');
    }
  }

  /** Skips what the reader of a part left unread. */
  async skipRest(): Promise<void> {
    if (!this.inData) return;
    for await (const chunk of this.partData()) void chunk;
  }
}

/** A quoted or bare parameter of a header value (`filename="a b"`), unescaping \" and \\. */
function param(value: string, key: string): string | null {
  const m = new RegExp(`(?:^|;)\\s*${key}=(?:"((?:[^"\\\\]|\\\\.)*)"|([^;\\s]*))`, 'i').exec(value);
  if (!m) return null;
  return m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : (m[2] ?? null);
}
