/** An HTTP/1.1 answer read whole: its status, the headers the client acts on, its body. */
export interface WholeAnswer {
  status: number;
  /** The connection may carry the next request (HTTP/1.1 without `Connection: close`). */
  keepAlive: boolean;
  /** The server's `Keep-Alive: timeout=N`, in ms (null: it named none). */
  keepAliveMs: number | null;
  body: Buffer;
}

/** The most a status line and headers may take (Node's own client allows 16 KiB). */
export const MAX_HEAD_BYTES = 64 * 1024;
/** The most a chunk's size line may take, extensions included. */
const MAX_CHUNK_LINE_BYTES = 1024;

/** A malformed answer: the connection it came on is not used again. */
export class BadAnswer extends Error {
  override readonly name = 'BadAnswer';
}

const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');

type Body = { kind: 'length'; left: number } | { kind: 'chunked'; left: number; trailers: boolean } | { kind: 'close' } | { kind: 'none' };

/**
 * Reads one HTTP/1.1 answer from the bytes of a connection, in whatever pieces they come: `push`
 * each piece, and it answers the whole answer once its last byte is in (null before). 1xx answers
 * are skipped; the body is delimited by Content-Length, by chunked coding, or (neither) by the
 * connection's end (`end`). Bytes past the answer are an error: one request at a time goes on a
 * connection, so the server sent what nobody asked for. Pure: no I/O, no clock.
 * @example
 * const p = new ResponseParser('GET');
 * socket.on('data', (b) => { const a = p.push(b); if (a) done(a); });
 */
export class ResponseParser {
  private head: Buffer[] = [];
  private headBytes = 0;
  /** The head's last bytes so far (at most 3): its blank line may straddle two pieces. */
  private headTail: Buffer = Buffer.alloc(0);
  private pending: Buffer = Buffer.alloc(0);
  private parts: Buffer[] = [];
  private status = 0;
  private keepAlive = true;
  private keepAliveMs: number | null = null;
  private body: Body | null = null;
  private done = false;
  private seen = false;

  /** `method`: a HEAD request's answer has no body, whatever its headers say. */
  constructor(private readonly method: string) {}

  /** Takes the next bytes of the connection; the answer once it is whole. Throws BadAnswer. */
  push(bytes: Buffer): WholeAnswer | null {
    if (this.done) throw new BadAnswer('bytes after the answer');
    if (bytes.length) this.seen = true;
    let b = bytes;
    for (;;) {
      if (this.body === null) {
        const rest = this.readHead(b);
        if (rest === null) return null;
        b = rest;
        // After a 1xx answer the head of the real one follows.
        if (this.body === null) {
          if (!b.length) return null;
          continue;
        }
      }
      if (!this.done) b = this.readBody(b);
      if (!this.done) return null;
      if (b.length) throw new BadAnswer('bytes after the answer');
      return this.answer();
    }
  }

  /** The connection ended: the answer if its body ran to the end (no length given), else BadAnswer. */
  end(): WholeAnswer {
    if (this.body?.kind === 'close' && !this.done) {
      this.done = true;
      return this.answer();
    }
    throw new BadAnswer(this.seen ? 'the connection closed in the middle of an answer' : 'the connection closed before an answer');
  }

  private answer(): WholeAnswer {
    const body = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts);
    return { status: this.status, keepAlive: this.keepAlive, keepAliveMs: this.keepAliveMs, body };
  }

  /**
   * Collects the head up to its blank line; what follows it in `b`, or null while it is not whole.
   * Only the new piece (and the 3 bytes before it) is searched: a head that comes a byte at a time
   * costs its length, not its square.
   */
  private readHead(b: Buffer): Buffer | null {
    const tail = this.headTail;
    const probe = tail.length ? Buffer.concat([tail, b]) : b;
    const at = probe.indexOf(HEAD_END);
    if (at < 0) {
      this.headBytes += b.length;
      if (this.headBytes > MAX_HEAD_BYTES) throw new BadAnswer(`an answer's head over ${MAX_HEAD_BYTES} bytes`);
      this.head.push(b);
      this.headTail = b.length >= 3 ? b.subarray(b.length - 3) : probe.subarray(Math.max(0, probe.length - 3));
      return null;
    }
    // The blank line ends in this piece (had it ended in the tail, the last piece would have found it).
    const end = at + HEAD_END.length - tail.length;
    if (this.headBytes + end - HEAD_END.length > MAX_HEAD_BYTES) throw new BadAnswer(`an answer's head over ${MAX_HEAD_BYTES} bytes`);
    this.head.push(b.subarray(0, end));
    const whole = this.head.length === 1 ? this.head[0]! : Buffer.concat(this.head);
    this.head = [];
    this.headBytes = 0;
    this.headTail = Buffer.alloc(0);
    this.parseHead(whole.subarray(0, whole.length - HEAD_END.length).toString('latin1'));
    return b.subarray(end);
  }

  private parseHead(text: string): void {
    const lines = text.split('\r\n');
    const m = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: [^\r\n]*)?$/.exec(lines[0] ?? '');
    if (!m) throw new BadAnswer(`not an HTTP/1.x status line: ${JSON.stringify((lines[0] ?? '').slice(0, 80))}`);
    const minor = m[1];
    const status = Number(m[2]);
    let length: number | null = null;
    let chunked = false;
    let close = minor === '0';
    let keepAliveMs: number | null = null;
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(':');
      if (colon <= 0 || /[\s]/.test(line[colon - 1]!) || /^[\s]/.test(line))
        throw new BadAnswer(`a malformed header line: ${JSON.stringify(line.slice(0, 80))}`);
      const name = line.slice(0, colon).toLowerCase();
      // Optional white space is spaces and tabs only.
      const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '');
      if (name === 'content-length') {
        if (!/^\d{1,15}$/.test(value)) throw new BadAnswer(`a bad Content-Length: ${JSON.stringify(value.slice(0, 40))}`);
        const n = Number(value);
        if (length !== null && length !== n) throw new BadAnswer('two different Content-Lengths');
        length = n;
      } else if (name === 'transfer-encoding') {
        // Only chunked, once (two header lines of it are "chunked, chunked": refused).
        if (chunked || value.toLowerCase() !== 'chunked')
          throw new BadAnswer(`a Transfer-Encoding this client does not take: ${JSON.stringify(value.slice(0, 40))}`);
        chunked = true;
      } else if (name === 'connection') {
        const tokens = value
          .toLowerCase()
          .split(',')
          .map((s) => s.trim());
        if (tokens.includes('close')) close = true;
        else if (tokens.includes('keep-alive') && minor === '0') close = false;
      } else if (name === 'keep-alive') {
        const t = /(?:^|[\s,])timeout=(\d{1,9})(?:$|[\s,])/i.exec(value);
        if (t) keepAliveMs = Number(t[1]) * 1000;
      }
    }
    if (chunked && length !== null) throw new BadAnswer('both Content-Length and Transfer-Encoding');
    if (status < 200) {
      // 1xx: an interim answer; the real one follows (101 is never asked for here).
      if (status === 101) throw new BadAnswer('an upgrade nobody asked for');
      return;
    }
    this.status = status;
    this.keepAlive = !close;
    this.keepAliveMs = keepAliveMs;
    if (this.method === 'HEAD' || status === 204 || status === 304) this.body = { kind: 'none' };
    else if (chunked) this.body = { kind: 'chunked', left: -1, trailers: false };
    else if (length !== null) this.body = { kind: 'length', left: length };
    else {
      this.body = { kind: 'close' };
      this.keepAlive = false;
    }
    if (this.body.kind === 'none' || (this.body.kind === 'length' && this.body.left === 0)) this.done = true;
  }

  /** Takes body bytes from `b`; answers what is left after the body (only once it is whole). */
  private readBody(b: Buffer): Buffer {
    const k = this.body!;
    if (k.kind === 'none') {
      this.done = true;
      return b;
    }
    if (k.kind === 'close') {
      this.parts.push(b);
      return Buffer.alloc(0);
    }
    if (k.kind === 'length') {
      const take = Math.min(k.left, b.length);
      if (take) this.parts.push(b.subarray(0, take));
      k.left -= take;
      if (k.left === 0) this.done = true;
      return b.subarray(take);
    }
    return this.readChunked(k, b);
  }

  /** Chunked coding: size lines, data each followed by CRLF, a 0 size, trailers to a blank line. */
  private readChunked(k: { left: number; trailers: boolean }, input: Buffer): Buffer {
    let b = this.pending.length ? Buffer.concat([this.pending, input]) : input;
    this.pending = Buffer.alloc(0);
    while (b.length) {
      if (k.left > 0) {
        const take = Math.min(k.left, b.length);
        this.parts.push(b.subarray(0, take));
        k.left -= take;
        b = b.subarray(take);
        if (k.left === 0) k.left = -2; // its CRLF next
        continue;
      }
      const eol = b.indexOf(CRLF);
      if (eol < 0) {
        if (b.length > MAX_CHUNK_LINE_BYTES) throw new BadAnswer('a chunk line too long');
        this.pending = Buffer.from(b);
        return Buffer.alloc(0);
      }
      const line = b.subarray(0, eol).toString('latin1');
      b = b.subarray(eol + 2);
      if (k.left === -2) {
        if (line !== '') throw new BadAnswer('a chunk not followed by CRLF');
        k.left = -1;
      } else if (k.trailers) {
        if (line === '') {
          this.done = true;
          return b;
        }
        if (line.length > MAX_CHUNK_LINE_BYTES) throw new BadAnswer('a trailer too long');
      } else {
        if (line.length > MAX_CHUNK_LINE_BYTES) throw new BadAnswer('a chunk line too long');
        const size = /^([0-9a-fA-F]{1,12})[ \t]*(?:;.*)?$/.exec(line);
        if (!size) throw new BadAnswer(`a bad chunk size: ${JSON.stringify(line.slice(0, 40))}`);
        const n = parseInt(size[1]!, 16);
        if (n === 0) k.trailers = true;
        else k.left = n;
      }
    }
    return b;
  }
}
