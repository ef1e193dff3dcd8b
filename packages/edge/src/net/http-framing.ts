/**
 * Where one HTTP/1.x request ends, so the egress proxy forwards exactly one per connection.
 * Pure: a strict reading of a request head (RFC 9112), and a meter over the body bytes that
 * follow it. What a lenient upstream could read differently from this proxy is refused: bare
 * CR or LF, folded lines, Transfer-Encoding other than a final `chunked`, Content-Length next
 * to Transfer-Encoding, or two Content-Lengths that differ.
 */

/** How the body after a head is delimited. */
export type Framing = { kind: 'length'; bytes: number } | { kind: 'chunked' };

export type HeadCheck = { ok: true; headBytes: number; framing: Framing } | { ok: false; why: string };

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** The largest body length this proxy accepts in a head (more than any upload sent through it). */
const MAX_LENGTH = 2 ** 48;

/** Checks the request head at the start of `buf` (it ends at the first CRLF CRLF). */
export function checkHead(buf: Buffer): HeadCheck {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return { ok: false, why: 'no end of the request head' };
  const text = buf.toString('latin1', 0, end);
  const lines = text.split('\r\n');
  for (const l of lines) {
    if (/[\r\n\0]/.test(l)) return { ok: false, why: 'a bare CR, LF or NUL in the request head' };
  }
  const lengths: string[] = [];
  const encodings: string[] = [];
  for (const l of lines.slice(1)) {
    if (l.startsWith(' ') || l.startsWith('\t')) return { ok: false, why: 'a folded header line' };
    const colon = l.indexOf(':');
    if (colon <= 0 || !TOKEN.test(l.slice(0, colon))) return { ok: false, why: 'a malformed header line' };
    const name = l.slice(0, colon).toLowerCase();
    const value = l.slice(colon + 1).trim();
    if (name === 'content-length') lengths.push(...value.split(',').map((v) => v.trim()));
    else if (name === 'transfer-encoding') encodings.push(...value.split(',').map((v) => v.trim().toLowerCase()));
  }
  const headBytes = end + 4;
  if (encodings.length > 0) {
    if (lengths.length > 0) return { ok: false, why: 'both Content-Length and Transfer-Encoding' };
    if (encodings[encodings.length - 1] !== 'chunked' || encodings.indexOf('chunked') !== encodings.length - 1) {
      return { ok: false, why: 'a Transfer-Encoding this proxy does not frame' };
    }
    return { ok: true, headBytes, framing: { kind: 'chunked' } };
  }
  if (lengths.length === 0) return { ok: true, headBytes, framing: { kind: 'length', bytes: 0 } };
  if (!lengths.every((v) => /^[0-9]{1,15}$/.test(v) && v === lengths[0])) return { ok: false, why: 'a bad or ambiguous Content-Length' };
  const bytes = Number(lengths[0]);
  if (bytes > MAX_LENGTH) return { ok: false, why: 'a Content-Length too large' };
  return { ok: true, headBytes, framing: { kind: 'length', bytes } };
}

/** The longest chunk-size line or trailer line a meter reads. */
const MAX_LINE = 4096;

type ChunkState = 'size' | 'data' | 'data-crlf' | 'trailer';

/**
 * Counts off one request's body as its bytes arrive: `take` returns the bytes that belong to the
 * request and may be forwarded now; a pipelined next request is never returned. In a chunked
 * body a line (a chunk size, the CRLF after a chunk's data, a trailer) is returned only once it
 * is whole and well-formed, so a malformed one reaches no upstream.
 */
export class BodyMeter {
  private left: number;
  private state: ChunkState = 'size';
  /** The start of a line not yet whole, held back. */
  private held: Buffer = Buffer.alloc(0);
  private failed: string | null = null;
  private ended = false;

  /**
   * `noTrailers`: a chunked body's trailer fields are refused (a request to an endpoint, whose
   * headers the node sets: a trailer could say them again).
   */
  constructor(
    private readonly framing: Framing,
    private readonly o: { noTrailers?: boolean } = {},
  ) {
    this.left = framing.kind === 'length' ? framing.bytes : 0;
  }

  /** Whether the whole body has been counted. */
  get done(): boolean {
    return this.framing.kind === 'length' ? this.left === 0 : this.ended;
  }

  /** Why the chunked body was malformed (then nothing more is returned), or null. */
  get error(): string | null {
    return this.failed;
  }

  take(chunk: Buffer): Buffer {
    if (this.done || this.failed) return EMPTY;
    if (this.framing.kind === 'length') {
      const n = Math.min(this.left, chunk.length);
      this.left -= n;
      return chunk.subarray(0, n);
    }
    const b = this.held.length ? Buffer.concat([this.held, chunk]) : chunk;
    this.held = EMPTY;
    let i = 0;
    while (i < b.length && !this.ended) {
      if (this.state === 'data') {
        const n = Math.min(this.left, b.length - i);
        i += n;
        this.left -= n;
        if (this.left === 0) this.state = 'data-crlf';
        continue;
      }
      const nl = b.indexOf(0x0a, i);
      if (nl < 0 || nl + 1 - i > MAX_LINE) {
        if (b.length - i > MAX_LINE) return this.fail('a chunk line too long', b, i);
        this.held = Buffer.from(b.subarray(i));
        return b.subarray(0, i);
      }
      const line = b.toString('latin1', i, nl + 1);
      if (!line.endsWith('\r\n') || /[\r\n]/.test(line.slice(0, -2))) return this.fail('a bare CR or LF in a chunked body', b, i);
      const content = line.slice(0, -2);
      if (this.state === 'data-crlf') {
        if (content !== '') return this.fail('chunk data longer than its size', b, i);
        this.state = 'size';
      } else if (this.state === 'size') {
        const m = /^([0-9A-Fa-f]{1,12})(?:[ \t]*;.*)?$/.exec(content);
        if (!m) return this.fail('a bad chunk size', b, i);
        this.left = parseInt(m[1]!, 16);
        this.state = this.left === 0 ? 'trailer' : 'data';
      } else if (content === '') {
        this.ended = true; // the empty line after the trailers
      } else if (this.o.noTrailers) {
        return this.fail('trailer fields are not forwarded', b, i);
      }
      i = nl + 1;
    }
    return b.subarray(0, i);
  }

  private fail(why: string, b: Buffer, before: number): Buffer {
    this.failed = why;
    return b.subarray(0, before);
  }
}

const EMPTY = Buffer.alloc(0);
