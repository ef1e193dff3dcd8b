import { WarrenError } from '@warren/api';

export interface Part {
  name: string | null;
  filename: string | null;
  data: Buffer;
}

/** At most this many parts in one upload. */
const MAX_PARTS = 1024;

/**
 * The parts of a `multipart/form-data` body (RFC 7578) whose content type is `contentType` (it
 * names the boundary). Pure; the body is whole (its size bounded by the caller).
 */
export function parseMultipart(body: Buffer, contentType: string): Part[] {
  const m = /boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary) throw new WarrenError('invalid_argument', 'a multipart body without a boundary');
  const delim = Buffer.from(`--${boundary}`);
  const parts: Part[] = [];
  let at = body.indexOf(delim);
  if (at < 0) throw new WarrenError('invalid_argument', 'a multipart body without its boundary');
  for (;;) {
    at += delim.length;
    if (body.subarray(at, at + 2).toString() === '--') return parts;
    if (body.subarray(at, at + 2).toString() !== '\r\n') throw new WarrenError('invalid_argument', 'a malformed multipart body');
    at += 2;
    const headEnd = body.indexOf('\r\n\r\n', at);
    if (headEnd < 0) throw new WarrenError('invalid_argument', 'a multipart part without its headers’ end');
    const head = body.subarray(at, headEnd).toString('utf8');
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delim]), headEnd + 4);
    if (next < 0) throw new WarrenError('invalid_argument', 'a multipart body cut short');
    const disposition = /^content-disposition:(.*)$/im.exec(head)?.[1] ?? '';
    parts.push({ name: param(disposition, 'name'), filename: param(disposition, 'filename'), data: body.subarray(headEnd + 4, next) });
    if (parts.length > MAX_PARTS) throw new WarrenError('invalid_argument', `more than ${MAX_PARTS} parts in one upload`);
    at = next + 2;
  }
}

/** A quoted or bare parameter of a header value (`filename="a b"`), unescaping \" and \\. */
function param(value: string, key: string): string | null {
  const m = new RegExp(`(?:^|;)\\s*${key}=(?:"((?:[^"\\\\]|\\\\.)*)"|([^;\\s]*))`, 'i').exec(value);
  if (!m) return null;
  return m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : (m[2] ?? null);
}
