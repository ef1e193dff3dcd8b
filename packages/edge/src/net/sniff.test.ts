import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { createServer as createTcp } from 'node:net';
import { sniffHttp, sniffTls } from './sniff.js';

/** The ClientHello Node's own TLS client sends for a server name. */
async function clientHello(servername: string | undefined): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const srv = createTcp((s) => {
    s.on('data', (d: Buffer) => {
      chunks.push(d);
      s.destroy();
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((resolve) => {
    const c = connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false });
    c.on('error', () => resolve());
    c.on('close', () => resolve());
  });
  srv.close();
  return Buffer.concat(chunks);
}

test('the SNI of a real ClientHello, byte by byte', async () => {
  const hello = await clientHello('files.pyfiles.example');
  assert.deepEqual(sniffTls(hello), { kind: 'name', name: 'files.pyfiles.example' });
  for (const n of [0, 3, 5, 40, hello.length - 1]) assert.deepEqual(sniffTls(hello.subarray(0, n)), { kind: 'need' });
  // Split into two handshake records: still found.
  const body = hello.subarray(5);
  const rec = (b: Buffer): Buffer => Buffer.concat([Buffer.from([0x16, 3, 1, b.length >> 8, b.length & 255]), b]);
  assert.deepEqual(sniffTls(Buffer.concat([rec(body.subarray(0, 50)), rec(body.subarray(50))])), { kind: 'name', name: 'files.pyfiles.example' });
});

test('a ClientHello without SNI, and what is not TLS', async () => {
  assert.equal(sniffTls(await clientHello(undefined)).kind, 'none');
  assert.equal(sniffTls(Buffer.from('GET / HTTP/1.1\r\n\r\n')).kind, 'bad');
  assert.equal(sniffTls(Buffer.from([0x16, 3, 1, 0, 0])).kind, 'bad');
  assert.equal(sniffTls(Buffer.alloc(20000, 0x16)).kind, 'bad');
});

test('HTTP Host: one header, consistent with an absolute target', () => {
  assert.deepEqual(sniffHttp(Buffer.from('GET /simple/ HTTP/1.1\r\nHost: pypi.example\r\nAccept: */*\r\n\r\n')), { kind: 'name', name: 'pypi.example' });
  assert.deepEqual(sniffHttp(Buffer.from('GET http://pypi.example/x HTTP/1.1\r\nHost: pypi.example\r\n\r\n')), { kind: 'name', name: 'pypi.example' });
  assert.deepEqual(sniffHttp(Buffer.from('GET / HTTP/1.1\r\nHost: pypi.example\r\n')), { kind: 'need' });
  assert.equal(sniffHttp(Buffer.from('GET http://evil.com/ HTTP/1.1\r\nHost: pypi.example\r\n\r\n')).kind, 'bad');
  assert.equal(sniffHttp(Buffer.from('GET / HTTP/1.1\r\nHost: pypi.example\r\nHost: evil.com\r\n\r\n')).kind, 'bad');
  assert.equal(sniffHttp(Buffer.from('GET / HTTP/1.0\r\n\r\n')).kind, 'none');
  assert.equal(sniffHttp(Buffer.from('CONNECT pypi.example:443 HTTP/1.1\r\nHost: pypi.example\r\n\r\n')).kind, 'bad');
  assert.equal(sniffHttp(Buffer.from('\x16\x03\x01 junk\r\n\r\n')).kind, 'bad');
  assert.equal(sniffHttp(Buffer.alloc(17000, 'a')).kind, 'bad');
});
