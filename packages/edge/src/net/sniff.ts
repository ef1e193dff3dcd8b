/**
 * What the egress proxy reads of a connection before it decides: the TLS ClientHello's server
 * name, or an HTTP request's Host. Pure parsers over the bytes received so far.
 */

/** More bytes are needed; or the name; or none in a well-formed message; or not the protocol. */
export type Sniffed = { kind: 'need' } | { kind: 'name'; name: string } | { kind: 'none' } | { kind: 'bad'; why: string };

/** The most a proxy buffers before it decides (a ClientHello or a request head). */
export const MAX_SNIFF_BYTES = 16 * 1024;

const need: Sniffed = { kind: 'need' };
const bad = (why: string): Sniffed => ({ kind: 'bad', why });

/** The SNI host name of a TLS ClientHello (which may span several handshake records). */
export function sniffTls(buf: Buffer): Sniffed {
  // Reassemble the handshake bytes from consecutive handshake records.
  const parts: Buffer[] = [];
  let off = 0;
  let have = 0;
  let wanted = -1;
  while (wanted < 0 || have < wanted) {
    if (buf.length < off + 5) return buf.length >= MAX_SNIFF_BYTES ? bad('ClientHello too large') : need;
    if (buf[off] !== 0x16) return bad('not a TLS handshake');
    if (buf[off + 1] !== 3) return bad('not TLS');
    const len = buf.readUInt16BE(off + 3);
    if (len === 0 || len > 16384) return bad('bad TLS record');
    if (buf.length < off + 5 + len) return buf.length >= MAX_SNIFF_BYTES ? bad('ClientHello too large') : need;
    parts.push(buf.subarray(off + 5, off + 5 + len));
    have += len;
    off += 5 + len;
    if (wanted < 0) {
      const hs = Buffer.concat(parts);
      if (hs.length < 4) continue;
      if (hs[0] !== 1) return bad('not a ClientHello');
      wanted = 4 + hs.readUIntBE(1, 3);
      if (wanted > MAX_SNIFF_BYTES) return bad('ClientHello too large');
    }
  }
  const hello = Buffer.concat(parts).subarray(4, wanted);
  return sniParse(hello);
}

function sniParse(h: Buffer): Sniffed {
  let p = 2 + 32; // version, random
  if (h.length < p + 1) return bad('short ClientHello');
  p += 1 + h[p]!; // session id
  if (h.length < p + 2) return bad('short ClientHello');
  p += 2 + h.readUInt16BE(p); // cipher suites
  if (h.length < p + 1) return bad('short ClientHello');
  p += 1 + h[p]!; // compression methods
  if (h.length === p) return { kind: 'none' };
  if (h.length < p + 2) return bad('short ClientHello');
  const end = p + 2 + h.readUInt16BE(p);
  if (end > h.length) return bad('bad extensions');
  p += 2;
  while (p + 4 <= end) {
    const type = h.readUInt16BE(p);
    const len = h.readUInt16BE(p + 2);
    const body = p + 4;
    if (body + len > end) return bad('bad extension');
    if (type === 0) {
      // server_name: a list of (type, name); one host_name is all a client may send.
      if (len < 2) return bad('bad server_name');
      let q = body + 2;
      const listEnd = Math.min(body + 2 + h.readUInt16BE(body), body + len);
      while (q + 3 <= listEnd) {
        const nameType = h[q]!;
        const nameLen = h.readUInt16BE(q + 1);
        if (q + 3 + nameLen > listEnd) return bad('bad server_name');
        if (nameType === 0) {
          const name = h.toString('latin1', q + 3, q + 3 + nameLen);
          return /^[\x21-\x7e]+$/.test(name) ? { kind: 'name', name } : bad('bad server_name');
        }
        q += 3 + nameLen;
      }
      return { kind: 'none' };
    }
    p = body + len;
  }
  return { kind: 'none' };
}

/** An HTTP/1.x request head: its Host (one, consistent with an absolute-form target). */
export function sniffHttp(buf: Buffer): Sniffed {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return buf.length >= MAX_SNIFF_BYTES ? bad('request head too large') : need;
  const lines = buf.toString('latin1', 0, end).split('\r\n');
  const m = /^([A-Z]{1,16}) (\S+) HTTP\/1\.[01]$/.exec(lines[0] ?? '');
  if (!m) return bad('not an HTTP/1 request');
  if (m[1] === 'CONNECT') return bad('CONNECT is not served here');
  const hosts = lines.slice(1).filter((l) => /^host[ \t]*:/i.test(l));
  if (hosts.length > 1) return bad('more than one Host header');
  const host = hosts[0]?.slice(hosts[0].indexOf(':') + 1).trim();
  const abs = /^http:\/\/([^/?#]+)/i.exec(m[2]!);
  if (abs && host !== undefined && abs[1]!.toLowerCase() !== host.toLowerCase()) return bad('the target and the Host header name different hosts');
  const name = abs?.[1] ?? host;
  return name ? { kind: 'name', name } : { kind: 'none' };
}
