import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InitCall, finishCall, unixAgent } from './call.js';
import { MAX_FRAME_BYTES, REPLY, REQ, FrameDecoder, encodeFields, encodeFrame } from './frame.js';
import { keptConnectionsOnNode } from './kept-connections.js';

/**
 * A stand-in init that keeps connections as warren-init does from version 2: after `Y`, each
 * request is answered `x` then `y` (or as `answer` says), on the same connection. It records
 * every connection and the frame types each carried.
 */
async function keepingInit(
  answer: (sock: Socket, type: string) => void = (s) => s.write(Buffer.concat([encodeFrame(REPLY.done, encodeFields([])), encodeFrame(REPLY.ready)])),
) {
  const dir = await mkdtemp(join(tmpdir(), 'warren-kept-'));
  const path = join(dir, 'init.sock');
  const conns: Array<{ sock: Socket; frames: string[] }> = [];
  const server = createServer((sock) => {
    const c = { sock, frames: [] as string[] };
    conns.push(c);
    const d = new FrameDecoder(MAX_FRAME_BYTES);
    sock.on('data', (b: Buffer) => {
      for (const f of d.push(b)) {
        c.frames.push(f.type);
        if (f.type !== REQ.reuse && f.type === f.type.toUpperCase()) answer(sock, f.type);
      }
    });
    sock.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(path, r));
  return {
    path,
    conns,
    close: async () => {
      for (const c of conns) c.sock.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

const stat = async (agent: ReturnType<typeof unixAgent>): Promise<void> => {
  await finishCall(await InitCall.open(agent, REQ.stat, [['p', '/']]));
};

test('a kept connection carries call after call: `Y` once before its first request, each call ended by `y`; at most two idle per init', async () => {
  const init = await keepingInit();
  const agent = unixAgent(init.path, { keep: true });
  const before = keptConnectionsOnNode();
  try {
    for (let i = 0; i < 5; i++) await stat(agent);
    assert.equal(init.conns.length, 1, 'one connection for five calls');
    assert.deepEqual(init.conns[0]!.frames, ['Y', 'S', 'S', 'S', 'S', 'S']);
    assert.equal(keptConnectionsOnNode(), before + 1);
    // Three at once: three connections; two are kept after, the third closed.
    await Promise.all([stat(agent), stat(agent), stat(agent)]);
    assert.equal(init.conns.length, 3);
    assert.equal(keptConnectionsOnNode(), before + 2);
    // A paused sandbox keeps none, and asks for none until it is resumed.
    agent.kept!.close();
    assert.equal(keptConnectionsOnNode(), before);
    await stat(agent);
    assert.deepEqual(init.conns[3]!.frames, ['S'], 'no Y while closed');
    agent.kept!.reopen();
    await stat(agent);
    assert.deepEqual(init.conns[4]!.frames, ['Y', 'S']);
    agent.kept!.close();
  } finally {
    await init.close();
  }
});

test('a kept connection the init closes is dropped, and the next call connects anew; one without keep is never kept', async () => {
  const init = await keepingInit();
  const agent = unixAgent(init.path, { keep: true });
  const before = keptConnectionsOnNode();
  try {
    await stat(agent);
    init.conns[0]!.sock.destroy();
    // The idle one hears its close.
    await new Promise<void>((r) => {
      const check = (): void => (keptConnectionsOnNode() === before ? r() : void setTimeout(check, 5));
      check();
    });
    await stat(agent);
    assert.equal(init.conns.length, 2);
    const plain = unixAgent(init.path);
    // A plain agent never sends Y; an unasked `y` (after the answer, which stands) closes the connection, kept by nobody.
    await stat(plain);
    assert.deepEqual(init.conns[2]!.frames, ['S']);
    await new Promise<void>((r) => (init.conns[2]!.sock.closed ? r() : init.conns[2]!.sock.once('close', () => r())));
    assert.equal(keptConnectionsOnNode(), before + 1);
    agent.kept!.close();
  } finally {
    await init.close();
  }
});

test('an init that says more after `y` is not trusted: the call fails and the connection is closed, not kept', async () => {
  const init = await keepingInit((s) =>
    s.write(Buffer.concat([encodeFrame(REPLY.done, encodeFields([])), encodeFrame(REPLY.ready), encodeFrame(REPLY.stdout, Buffer.from('late'))])),
  );
  const agent = unixAgent(init.path, { keep: true });
  const before = keptConnectionsOnNode();
  try {
    // The `x` was read before the `y`: the call's answer stands; the connection does not.
    await stat(agent).catch(() => undefined);
    assert.equal(keptConnectionsOnNode(), before);
    await stat(agent).catch(() => undefined);
    assert.equal(init.conns.length, 2, 'the bad connection was not used again');
  } finally {
    await init.close();
  }
});
