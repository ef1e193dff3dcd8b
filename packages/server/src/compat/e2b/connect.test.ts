import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { ConnectStream } from './connect.js';

test('a Connect stream goes at its client’s pace: one that stops reading holds the server to a message and its socket buffers (W3-14)', async () => {
  const N = 400;
  const message = { data: 'x'.repeat(64 * 1024) };
  let most = 0;
  let sent = 0;
  let stalled!: () => void;
  const stall = new Promise<void>((resolve) => (stalled = resolve));
  const server = createServer((_req, res: ServerResponse) => {
    void (async () => {
      const out = new ConnectStream(res);
      for (let i = 0; i < N; i++) {
        const p = out.send(message);
        most = Math.max(most, res.writableLength);
        if (res.writableNeedDrain) stalled();
        await p;
        sent++;
      }
      out.end();
    })();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const socket = connect((server.address() as AddressInfo).port, '127.0.0.1');
  try {
    socket.pause();
    socket.write('POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    // The server's socket fills while the client reads nothing: its sends wait from there on.
    await stall;
    const atStall = sent;
    assert.ok(atStall < N / 4, `${atStall} of ${N} messages went out to a client that reads nothing`);
    // Read, and everything arrives; what was ever buffered on the server is about one message.
    let bytes = 0;
    socket.on('data', (b: Buffer) => void (bytes += b.length));
    socket.resume();
    await once(socket, 'end');
    assert.equal(sent, N);
    assert.ok(bytes > N * 64 * 1024, `${bytes} bytes read`);
    assert.ok(most < 4 * 64 * 1024, `${most} bytes buffered at most`);
  } finally {
    socket.destroy();
    server.close();
  }
});
