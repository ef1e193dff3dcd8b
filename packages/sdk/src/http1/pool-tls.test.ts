import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { once } from 'node:events';
import { Http1Pool } from './pool.js';
import { LOCALHOST_CERT, LOCALHOST_KEY } from './localhost-cert.fixture.js';

/** A loopback HTTPS server for `localhost`: each answer says whether its connection resumed a TLS session. */
async function serveTls(t: TestContext): Promise<{ port: number; connections: () => number; requests: () => number }> {
  let connections = 0;
  let requests = 0;
  const server = createServer({ key: LOCALHOST_KEY, cert: LOCALHOST_CERT, keepAliveTimeout: 65_000 }, (req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ url: req.url, resumed: (req.socket as TLSSocket).isSessionReused() }));
    });
  });
  server.on('secureConnection', () => connections++);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, connections: () => connections, requests: () => requests };
}

function tlsPool(t: TestContext, port: number, tls: { servername?: string; ca?: string }): Http1Pool {
  const p = new Http1Pool({ host: '127.0.0.1', port, hostHeader: `localhost:${port}`, tls });
  t.after(() => p.close());
  return p;
}

const body = (a: { body: Buffer }): { url: string; resumed: boolean } => JSON.parse(a.body.toString()) as { url: string; resumed: boolean };

test('over TLS: the server checked for its name, one connection kept for the calls, and a new one resumes the session', async (t) => {
  const srv = await serveTls(t);
  const pool = tlsPool(t, srv.port, { servername: 'localhost', ca: LOCALHOST_CERT });
  const first = await pool.request('GET', '/a', {});
  assert.equal(first.status, 200);
  assert.deepEqual(body(first), { url: '/a', resumed: false });
  assert.deepEqual(body(await pool.request('POST', '/b', {}, 'x')), { url: '/b', resumed: false });
  assert.equal(srv.connections(), 1);
  // Its kept connection dropped (the pool's own close), the next call makes a new one with the session it was given.
  pool.close();
  assert.deepEqual(body(await pool.request('GET', '/c', {})), { url: '/c', resumed: true });
  assert.equal(srv.connections(), 2);
});

test('over TLS, a certificate the client does not trust, or not for the name it asked, fails the call before any request is sent', async (t) => {
  const srv = await serveTls(t);
  await assert.rejects(
    tlsPool(t, srv.port, { servername: 'localhost' }).request('GET', '/', {}),
    (e: NodeJS.ErrnoException) => e.code === 'DEPTH_ZERO_SELF_SIGNED_CERT',
  );
  await assert.rejects(
    tlsPool(t, srv.port, { servername: 'other.example', ca: LOCALHOST_CERT }).request('GET', '/', {}),
    (e: NodeJS.ErrnoException) => e.code === 'ERR_TLS_CERT_ALTNAME_INVALID',
  );
  // No name given: the IP address connected to is what the certificate must name, and it names none.
  await assert.rejects(
    tlsPool(t, srv.port, { ca: LOCALHOST_CERT }).request('GET', '/', {}),
    (e: NodeJS.ErrnoException) => e.code === 'ERR_TLS_CERT_ALTNAME_INVALID',
  );
  assert.equal(srv.requests(), 0);
});
