/** A header name: an HTTP token. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A header value: visible Latin-1, spaces and tabs; no CR, LF or NUL that would end it early. */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A request target in origin form: a path and query already percent-encoded, nothing a space or control could split. */
const ORIGIN_FORM = /^\/[\x21-\x7e]*$/;

/** A body this large goes as it is, after its head, instead of being copied into one buffer with it. */
const COPY_BELOW_BYTES = 64 * 1024;

/**
 * One HTTP/1.1 request whole, head and a small body in one buffer (one write, one segment on the
 * wire; a large binary body follows its head uncopied):
 * `Host`, the headers given, and `Content-Length` when there is a body. Throws TypeError on a
 * method, target, header name or value that would change the request's framing (a CR or LF in
 * an API key, a space in a path), as Node's own client does. Pure.
 * @example
 * socket.write(...encodeRequest('POST', '/v1/sandboxes', '127.0.0.1:7070', { 'content-type': 'application/json' }, '{}'));
 */
export function encodeRequest(method: string, target: string, host: string, headers: Record<string, string>, body?: string | Uint8Array): Uint8Array[] {
  if (!TOKEN.test(method)) throw new TypeError(`not an HTTP method: ${JSON.stringify(method)}`);
  if (!ORIGIN_FORM.test(target)) throw new TypeError(`a request target with characters that must be percent-encoded: ${JSON.stringify(target)}`);
  if (!FIELD_VALUE.test(host) || host === '') throw new TypeError(`a bad Host: ${JSON.stringify(host)}`);
  let head = `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\n`;
  for (const name in headers) {
    const value = headers[name]!;
    if (!TOKEN.test(name)) throw new TypeError(`a bad header name: ${JSON.stringify(name)}`);
    if (!FIELD_VALUE.test(value)) throw new TypeError(`the header ${name} has a character it cannot carry`);
    head += `${name}: ${value}\r\n`;
  }
  const bodyBytes = body === undefined ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
  // A request without a body says so, except where a body has no meaning.
  if (body !== undefined || (method !== 'GET' && method !== 'HEAD' && method !== 'DELETE')) head += `Content-Length: ${bodyBytes}\r\n`;
  head += '\r\n';
  const headBytes = head.length; // Latin-1: a byte a character
  if (body !== undefined && typeof body !== 'string' && bodyBytes >= COPY_BELOW_BYTES) return [Buffer.from(head, 'latin1'), body];
  const out = Buffer.allocUnsafe(headBytes + bodyBytes);
  out.write(head, 0, 'latin1');
  if (typeof body === 'string') out.write(body, headBytes, 'utf8');
  else if (body !== undefined) out.set(body, headBytes);
  return [out];
}
