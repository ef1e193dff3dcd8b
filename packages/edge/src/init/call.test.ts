import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WarrenError } from '@warren/api';
import { InitCall, type AgentConnect } from './call.js';
import { listDir } from './channel.js';
import { MAX_FRAME_BYTES, REPLY, REQ, FrameDecoder, encodeFields, encodeFrame } from './frame.js';

/**
 * A stand-in init on a real Unix socket: `serve` gets each connection once its request frame is
 * in. The host's end is handed out too (`last`), to look at how much of it was read.
 */
async function fakeInit(serve: (sock: Socket, request: string) => void): Promise<{ agent: AgentConnect; last: () => Socket; close: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-init-'));
  const path = join(dir, 'init.sock');
  const open: Socket[] = [];
  const server = createServer((sock) => {
    open.push(sock);
    const d = new FrameDecoder(MAX_FRAME_BYTES);
    let served = false;
    sock.on('data', (c: Buffer) => {
      for (const f of d.push(c)) {
        if (!served) serve(sock, f.type);
        served = true;
      }
    });
    sock.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(path, r));
  let host: Socket | null = null;
  const agent: AgentConnect = () =>
    new Promise((resolve, reject) => {
      const s = connect(path);
      s.once('connect', () => resolve((host = s)));
      s.once('error', reject);
    });
  return {
    agent,
    last: () => host!,
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function until(pred: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`${what}: not so after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

test('InitCall: frames nobody reads pause the socket past about 1 MiB (bytes, not frames): the rest waits in the init', async () => {
  const frame = encodeFrame(REPLY.stdout, Buffer.alloc(1024 * 1024 - 16, 120));
  const init = await fakeInit((sock) => {
    for (let i = 0; i < 40; i++) sock.write(frame);
    sock.write(encodeFrame(REPLY.done, encodeFields([['c', '0']])));
  });
  try {
    const call = await InitCall.open(init.agent, REQ.read, [['p', '/big']]);
    const host = init.last();
    // 40 frames of 1 MiB: a bound in frames (64) would take them all in.
    await until(() => host.isPaused(), 'the socket pauses');
    assert.ok(host.bytesRead < 4 * 1024 * 1024, `read ${host.bytesRead} bytes before pausing`);
    // Read on: everything comes, in order.
    let n = 0;
    for (let f = await call.next(); f && f.type !== REPLY.done; f = await call.next()) n += f.payload.length;
    assert.equal(n, 40 * (1024 * 1024 - 16));
    call.close();
  } finally {
    await init.close();
  }
});

test('InitCall: a frame over the limit resets the connection at its header and fails the call clearly', async () => {
  const init = await fakeInit((sock) => {
    const head = Buffer.alloc(5);
    head.writeUInt32LE(16 * 1024 * 1024 + 1, 0);
    head[4] = REPLY.stdout.charCodeAt(0);
    sock.write(head);
    // The body would follow forever; nothing of it is waited for.
    sock.write(Buffer.alloc(64 * 1024));
  });
  try {
    const call = await InitCall.open(init.agent, REQ.read, [['p', '/big']]);
    await assert.rejects(call.next(), (e: WarrenError) => e.code === 'unavailable' && /over the 1048576 allowed/.test(String((e.cause as Error).message)));
    assert.ok(call.closed, 'the connection is gone');
  } finally {
    await init.close();
  }
});

test('listDir: an init that sends more than 100,000 entries is cut off there (payload_too_large), as the container init refuses', async () => {
  const entry = encodeFrame(
    REPLY.entry,
    encodeFields([
      ['p', '/d/x'],
      ['n', 'x'],
      ['t', 'f'],
    ]),
  );
  const init = await fakeInit((sock) => {
    // One more than the cap, then the end: only the host's cap refuses it.
    sock.write(Buffer.concat(Array.from({ length: 100_001 }, () => entry)));
    sock.write(encodeFrame(REPLY.done));
  });
  try {
    await assert.rejects(listDir(init.agent, '/d', 1), (e: WarrenError) => e.code === 'payload_too_large' && e.details.maxEntries === 100_000);
  } finally {
    await init.close();
  }
});
