/**
 * The DNS a sandbox sees: one question per query, answered here and never forwarded, so no
 * query (and nothing tunnelled in one) leaves the node. Pure message parsing and building.
 */

export const DNS_TYPE = { A: 1, AAAA: 28 } as const;
export const RCODE = { ok: 0, formerr: 1, servfail: 2, nxdomain: 3, notimp: 4, refused: 5 } as const;

export interface DnsQuestion {
  id: number;
  /** Opcode and RD bits of the query, echoed. */
  flags: number;
  /** Lowercase, no trailing dot; null when a label is not [a-z0-9_-] (answered REFUSED). */
  name: string | null;
  type: number;
  klass: number;
  /** The question section as sent (echoed in the answer). */
  raw: Buffer;
}

/** The one question of a query, or null for what cannot be answered at all (dropped). */
export function parseQuery(msg: Buffer): DnsQuestion | null {
  if (msg.length < 12 || msg.length > 512) return null;
  const id = msg.readUInt16BE(0);
  const flags = msg.readUInt16BE(2);
  if (flags & 0x8000) return null; // a response
  if (msg.readUInt16BE(4) !== 1) return { id, flags, name: null, type: 0, klass: 0, raw: Buffer.alloc(0) };
  let p = 12;
  const labels: string[] = [];
  let ok = true;
  for (;;) {
    if (p >= msg.length) return null;
    const len = msg[p]!;
    if (len === 0) break;
    if (len > 63) return null; // compression pointers have no place in a question
    if (p + 1 + len > msg.length) return null;
    const label = msg.toString('latin1', p + 1, p + 1 + len).toLowerCase();
    if (!/^[a-z0-9_-]+$/.test(label)) ok = false;
    labels.push(label);
    p += 1 + len;
  }
  p += 1;
  if (p + 4 > msg.length) return null;
  const name = labels.join('.');
  return {
    id,
    flags,
    name: ok && name.length <= 253 && labels.length > 0 ? name : null,
    type: msg.readUInt16BE(p),
    klass: msg.readUInt16BE(p + 2),
    raw: msg.subarray(12, p + 4),
  };
}

/** A response to a question: rcode, and an A record when `address` (a 32-bit IPv4) is given. */
export function buildAnswer(q: DnsQuestion, rcode: number, address: number | null, ttlSeconds = 30): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt16BE(q.id, 0);
  // QR, opcode and RD echoed, AA, RA.
  head.writeUInt16BE(0x8000 | (q.flags & 0x7900) | 0x0400 | 0x0080 | (rcode & 15), 2);
  head.writeUInt16BE(q.raw.length ? 1 : 0, 4);
  head.writeUInt16BE(address === null ? 0 : 1, 6);
  if (address === null) return Buffer.concat([head, q.raw]);
  const rr = Buffer.alloc(16);
  rr.writeUInt16BE(0xc00c, 0); // the name of the question
  rr.writeUInt16BE(DNS_TYPE.A, 2);
  rr.writeUInt16BE(1, 4);
  rr.writeUInt32BE(ttlSeconds, 6);
  rr.writeUInt16BE(4, 10);
  rr.writeUInt32BE(address >>> 0, 12);
  return Buffer.concat([head, q.raw, rr]);
}
