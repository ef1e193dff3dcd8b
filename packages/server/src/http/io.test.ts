import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readBody, sendError, sendJson } from './io.js';

/** A server whose one route reads a body of at most 16 bytes and answers its length. */
async function serve(): Promise<{ port: number; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    readBody(req, 16).then(
      (b) => sendJson(res, 200, { n: b.length }),
      (e: unknown) => sendError(res, e),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise((r) => server.close(() => r())) };
}

/** Sends `chunks` as a chunked body (no length declared); answers the status, body and whether the server closed the connection. */
function post(port: number, chunks: Buffer[]): Promise<{ status: number; body: string; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request({ port, host: '127.0.0.1', method: 'POST', path: '/', agent: new Agent({ keepAlive: true }) });
    req.once('error', reject);
    req.once('response', (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, body, closed: res.headers.connection === 'close' }));
    });
    for (const c of chunks) req.write(c);
    // The rest of an endless body never comes: the answer must not wait for it.
    if (chunks.length < 100) req.end();
  });
}

test('a body within the bound is read whole; one past it, declared or not, answers payload_too_large at once and closes the connection', async () => {
  const s = await serve();
  try {
    assert.deepEqual(await post(s.port, [Buffer.from('0123456789'), Buffer.from('abcdef')]), { status: 200, body: '{"n":16}', closed: false });
    const big = await post(
      s.port,
      Array.from({ length: 100 }, () => Buffer.alloc(1024, 1)),
    );
    assert.equal(big.status, 413);
    assert.equal((JSON.parse(big.body) as { error: { code: string } }).error.code, 'payload_too_large');
    assert.equal(big.closed, true);
  } finally {
    await s.close();
  }
});
