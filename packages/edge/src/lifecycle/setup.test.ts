import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { AgentConnect } from '../init/call.js';
import { FrameDecoder, MAX_FRAME_BYTES, REPLY, REQ, encodeFields, encodeFrame, type Frame } from '../init/frame.js';
import { unclaimedSpec } from './edge-spec.js';
import { SETUP_BATCH_BYTES, configureSandbox, splitSetupFiles } from './setup.js';

/** A request as a stand-in init saw it: its type and its fields, keys in order. */
interface Seen {
  type: string;
  keys: string;
  fields: Array<[string, Buffer]>;
}

function fieldsOf(payload: Buffer): Array<[string, Buffer]> {
  const out: Array<[string, Buffer]> = [];
  for (let i = 0; i < payload.length; ) {
    const n = payload.readUInt32LE(i + 1);
    out.push([String.fromCharCode(payload[i]!), payload.subarray(i + 5, i + 5 + n)]);
    i += 5 + n;
  }
  return out;
}

/**
 * A stand-in init on a real Unix socket that records each connection's request and answers it
 * with `answer` (default: `x`, after the file's end for W, `s` then exit 0 for E). Null: close.
 */
async function fakeInit(answer?: (req: Seen) => Frame | null | undefined): Promise<{ agent: AgentConnect; seen: Seen[]; close: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-setup-'));
  const path = join(dir, 'init.sock');
  const seen: Seen[] = [];
  const open: Socket[] = [];
  const server = createServer((sock) => {
    open.push(sock);
    const d = new FrameDecoder(MAX_FRAME_BYTES);
    let req: Seen | null = null;
    sock.on('data', (c: Buffer) => {
      for (const f of d.push(c)) {
        if (!req) {
          const fields = fieldsOf(f.payload);
          req = { type: f.type, keys: fields.map(([k]) => k).join(''), fields };
          seen.push(req);
          const a = answer?.(req);
          if (a === null) {
            sock.destroy();
            return;
          }
          if (a) sock.end(encodeFrame(a.type, a.payload));
          else if (f.type === REQ.exec)
            sock.end(Buffer.concat([encodeFrame(REPLY.started, encodeFields([['p', '9']])), encodeFrame(REPLY.done, encodeFields([['c', '0']]))]));
          else if (f.type !== REQ.write) sock.end(encodeFrame(REPLY.done));
        } else if (f.type === REQ.eof) sock.end(encodeFrame(REPLY.done));
      }
    });
    sock.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(path, r));
  const agent: AgentConnect = () =>
    new Promise((resolve, reject) => {
      const s = connect(path);
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    });
  return {
    agent,
    seen,
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

const spec = (user: string | null, workdir: string | null) => unclaimedSpec('sb-1', [], { cpu: 1, memoryMiB: 64, pids: 64 }, 0, { user, workdir });
const file = (path: string, bytes: number, mode?: number) => ({ path, content: Buffer.alloc(bytes, 'a'), mode });

test('a create with resolv.conf, user, workdir and files is one call to the init, in that order', async () => {
  const init = await fakeInit();
  try {
    await configureSandbox(init.agent, spec('agent', '/work'), [file('/work/a', 3, 0o600), file('/etc/b', 0)], 1 << 20, Buffer.from('nameserver 10.0.0.1\n'));
    assert.deepEqual(
      init.seen.map((s) => [s.type, s.keys]),
      [[REQ.setup, 'rUcpmBpB']],
    );
    const v = init.seen[0]!.fields.map(([k, b]) => `${k}=${b.toString()}`);
    assert.deepEqual(v, ['r=nameserver 10.0.0.1\n', 'U=agent', 'c=/work', 'p=/work/a', 'm=600', 'B=aaa', 'p=/etc/b', 'B=']);
  } finally {
    await init.close();
  }
});

test('files past 1 MiB in all go one by one after the set-up call, in order; one over the limit fails before any call; nothing to set up, no call', async () => {
  const files = [file('/a', 10), file('/b', SETUP_BATCH_BYTES - 10), file('/c', 1), file('/d', 1)];
  assert.deepEqual(
    Object.values(splitSetupFiles(files)).map((l) => l.map((f) => f.path)),
    [
      ['/a', '/b'],
      ['/c', '/d'],
    ],
  );
  const init = await fakeInit();
  try {
    await configureSandbox(init.agent, spec(null, null), files, 4 << 20);
    assert.deepEqual(
      init.seen.map((s) => [s.type, s.keys]),
      [
        [REQ.setup, 'pBpB'],
        [REQ.write, 'pP'],
        [REQ.write, 'pP'],
      ],
    );
    init.seen.length = 0;
    await assert.rejects(
      configureSandbox(init.agent, spec(null, null), [file('/a', 1), file('/big', 11)], 10),
      (e: WarrenError) => e.code === 'payload_too_large',
    );
    // Nothing to set up: no call at all.
    await configureSandbox(init.agent, spec(null, null), [], 10);
    assert.equal(init.seen.length, 0);
  } finally {
    await init.close();
  }
});

test("the init's refusal names the user or the file; an init without the set-up call gets the calls one by one", async () => {
  const failed = (w: string, n: number, p?: string): Frame => ({
    type: REPLY.failed,
    payload: encodeFields([['n', String(n)], ['m', `${w} failed`], ['w', w], ...(p ? [['p', p] as [string, string]] : [])]),
  });
  let answer: Frame | null = failed('user', 2);
  const init = await fakeInit((s) => (s.type === REQ.setup ? answer : undefined));
  try {
    await assert.rejects(configureSandbox(init.agent, spec('ghost', null), [], 10), (e: WarrenError) => {
      assert.equal(e.code, 'invalid_argument');
      assert.equal(e.message, 'user "ghost" does not exist in the image');
      return true;
    });
    answer = failed('file', 20, '/x/y');
    await assert.rejects(configureSandbox(init.agent, spec(null, null), [file('/x/y', 1)], 10), (e: WarrenError) => {
      assert.ok(e instanceof WarrenError);
      assert.equal(e.code, 'invalid_argument');
      assert.deepEqual(e.details, { path: '/x/y', errno: 20 });
      return true;
    });
    init.seen.length = 0;
    answer = null;
    await configureSandbox(init.agent, spec('agent', '/w'), [file('/f', 1)], 10, Buffer.from('nameserver 1.1.1.1\n'));
    assert.deepEqual(
      init.seen.map((s) => [s.type, s.keys]),
      [
        [REQ.setup, 'rUcpB'],
        [REQ.write, 'pPm'],
        [REQ.mkdir, 'pU'],
        [REQ.mkdir, 'pU'],
        [REQ.exec, 'aaaaUt'],
        [REQ.write, 'pPU'],
      ],
    );
  } finally {
    await init.close();
  }
});
