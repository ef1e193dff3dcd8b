import { X509Certificate, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';

/** A certificate and its key (PEM), and the certificate's SHA-256 fingerprint as Node prints it (`AB:CD:…`). */
export interface EdgeCertificate {
  key: string;
  cert: string;
  fingerprint: string;
}

/** A DER length: short form below 128, else the long form. */
function len(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>= 8) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

/** A DER value: its tag, length and content. */
const tlv = (tag: number, ...content: Buffer[]): Buffer => {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), len(body.length), body]);
};
const seq = (...c: Buffer[]): Buffer => tlv(0x30, ...c);

/** An OBJECT IDENTIFIER from its dotted form. */
function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number);
  const out = [a! * 40 + b!];
  for (const v of rest) {
    const groups: number[] = [];
    for (let x = v; ; x = Math.floor(x / 128)) {
      groups.unshift(x % 128);
      if (x < 128) break;
    }
    out.push(...groups.map((g, i) => (i < groups.length - 1 ? g | 0x80 : g)));
  }
  return tlv(0x06, Buffer.from(out));
}

/** A UTCTime (the years before 2050, which is all this makes). */
function utcTime(d: Date): Buffer {
  const p = (n: number): string => String(n).padStart(2, '0');
  const s = `${p(d.getUTCFullYear() % 100)}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}Z`;
  return tlv(0x17, Buffer.from(s, 'ascii'));
}

const ECDSA_SHA256 = seq(oid('1.2.840.10045.4.3.2'));

/**
 * A self-signed X.509 v3 certificate for `commonName` over a new ECDSA P-256 key, valid from a
 * day ago for ten years (pure but for the key and serial it draws). What an edge serves its
 * protocol's TLS with: nobody checks it against a CA, the control plane pins its fingerprint,
 * which the edge hands over in its join (RFC 5280's structure, written out in DER here: Node
 * reads certificates but does not make them).
 */
export function selfSignedCertificate(
  commonName: string,
  now = new Date(),
  keyPair?: { privateKey: KeyObject; publicKey: KeyObject },
  /** The serial's 16 bytes (default: random). */
  serialBytes: Buffer = randomBytes(16),
): EdgeCertificate {
  const { privateKey, publicKey } = keyPair ?? generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const serial = Buffer.from(serialBytes);
  // A positive INTEGER in DER's shortest form: top bit clear (not negative), the next one set (a
  // leading 0x00 before a byte under 0x80 is not DER: 1 serial in 256 made a certificate OpenSSL refused).
  serial[0] = (serial[0]! & 0x7f) | 0x40;
  const name = seq(tlv(0x31, seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(commonName, 'utf8')))));
  const from = new Date(now.getTime() - 86_400_000);
  const until = new Date(now.getTime() + 10 * 365 * 86_400_000);
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))), // version v3
    tlv(0x02, serial),
    ECDSA_SHA256,
    name,
    seq(utcTime(from), utcTime(until)),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
  );
  // ECDSA's signature in DER (Node's default), as a BIT STRING with no unused bits.
  const signature = sign('sha256', tbs, privateKey);
  const der = seq(tbs, ECDSA_SHA256, tlv(0x03, Buffer.from([0]), signature));
  const cert = `-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/(.{64})/g, '$1\n')}\n-----END CERTIFICATE-----\n`.replace(/\n\n/g, '\n');
  return {
    key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    cert,
    fingerprint: new X509Certificate(der).fingerprint256,
  };
}
