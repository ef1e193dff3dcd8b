import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type TLSSocket } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { selfSignedCertificate } from './tls-cert.js';

test('an edge’s certificate: a valid self-signed X.509 over its key, its fingerprint the one a TLS peer sees', async () => {
  const now = new Date('2026-12-05T10:00:00Z');
  const c = selfSignedCertificate('node-17', now);
  const x = new X509Certificate(c.cert);
  assert.equal(x.subject, 'CN=node-17');
  assert.equal(x.issuer, 'CN=node-17');
  assert.ok(x.verify(x.publicKey), 'signed by its own key');
  assert.ok(x.checkPrivateKey(createPrivateKey(c.key)));
  assert.equal(new Date(x.validFrom).toISOString(), '2026-12-04T10:00:00.000Z');
  assert.ok(new Date(x.validTo) > new Date('2036-01-01'));
  assert.equal(x.fingerprint256, c.fingerprint);
  assert.match(c.fingerprint, /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
  assert.notEqual(selfSignedCertificate('node-17', now).fingerprint, c.fingerprint, 'a new key and serial each time');
  // A TLS server serves it, and the client sees that fingerprint.
  const server = createServer({ key: c.key, cert: c.cert }, (s) => s.end('hi'));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const s: TLSSocket = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, rejectUnauthorized: false });
    await once(s, 'secureConnect');
    assert.equal(s.getPeerCertificate().fingerprint256, c.fingerprint);
    s.destroy();
  } finally {
    server.close();
  }
});

test('every serial makes a certificate OpenSSL reads: one drawn with a leading zero byte and a small next one too', () => {
  for (const first of [
    [0x00, 0x01],
    [0x80, 0x00],
    [0xff, 0xff],
    [0x00, 0x00],
  ]) {
    const serial = Buffer.alloc(16, 0x11);
    serial[0] = first[0]!;
    serial[1] = first[1]!;
    const x = new X509Certificate(selfSignedCertificate('node-1', new Date(), undefined, serial).cert);
    assert.equal(x.subject, 'CN=node-1', `serial ${serial.toString('hex')}`);
  }
});
