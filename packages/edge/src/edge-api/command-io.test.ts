import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecEvent, WarrenError } from '@warren/api';
import { InitCall } from '../init/call.js';
import { FrameDecoder, MAX_FRAME_BYTES, REPLY, REQ, encodeFields, encodeFrame, type Frame } from '../init/frame.js';
import { commandEvents } from './local.js';
import { Command } from '../lifecycle/command.js';
import { StdinBudgets, type StdinHold } from '../lifecycle/stdin-budget.js';

/**
 * A command on a stand-in init over a real Unix socket: the init answers the exec with `s`, then
 * `onFrame` sees each frame the host sends after it; `host` is the edge's end of the connection.
 */
async function fakeCommand(
  onFrame: (f: Frame, sock: Socket) => void,
  o: { stdinDeadlineMs?: number; maxOutputBytes?: number; readStdin?: boolean; stdin?: StdinHold } = {},
): Promise<{ cmd: Command; host: Socket; init: () => Socket; close: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-cmd-'));
  const path = join(dir, 'init.sock');
  let initEnd: Socket | null = null;
  const server = createServer((sock) => {
    initEnd = sock;
    sock.on('error', () => undefined);
    const d = new FrameDecoder(MAX_FRAME_BYTES);
    let started = false;
    sock.on('data', (c: Buffer) => {
      for (const f of d.push(c)) {
        if (!started) {
          started = true;
          sock.write(encodeFrame(REPLY.started, encodeFields([['p', '42']])));
          // An init whose command does not read stdin stops reading the connection.
          if (o.readStdin === false) sock.pause();
        } else onFrame(f, sock);
      }
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  let host: Socket | null = null;
  const call = await InitCall.open(
    () =>
      new Promise((resolve, reject) => {
        const s = connect(path);
        s.once('connect', () => resolve((host = s)));
        s.once('error', reject);
      }),
    REQ.exec,
    [['a', 'cat']],
  );
  assert.equal((await call.next())?.type, REPLY.started);
  const what = { cmd: ['cat'], cwd: null, env: {}, tag: null, pty: false };
  const cmd = new Command('cmd_t', 42, what, call, o.maxOutputBytes ?? 64 * 1024 * 1024, () => undefined, {
    stdinDeadlineMs: o.stdinDeadlineMs,
    stdin: o.stdin,
  });
  void cmd.pump();
  return {
    cmd,
    host: host!,
    init: () => initEnd!,
    close: async () => {
      call.close();
      initEnd?.destroy();
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

test('stdin waits for the sandbox to take it: a command that does not read gets resource_exhausted, never a growing edge', async () => {
  const t = await fakeCommand(() => undefined, { readStdin: false, stdinDeadlineMs: 300 });
  try {
    // What one command may have waiting: 16 MiB.
    const big = Buffer.alloc(16 * 1024 * 1024, 1);
    const first = t.cmd.writeStdin(big);
    first.catch(() => undefined);
    // While it waits, the next write is refused at once (and a small one too: the command is not reading).
    await assert.rejects(
      t.cmd.writeStdin(Buffer.from('x')),
      (e: WarrenError) => e.code === 'resource_exhausted' && e.details.maxPendingStdinBytes === 16 * 1024 * 1024,
    );
    // At most one frame of it went past what the socket could take.
    assert.ok(t.host.writableLength <= 1024 * 1024 + 64 * 1024, `unsent ${t.host.writableLength}`);
    // The sandbox never took it: the write fails at its deadline.
    await assert.rejects(first, (e: WarrenError) => e.code === 'resource_exhausted' && /did not take/.test(e.message));
    assert.ok(t.host.writableLength <= 1024 * 1024 + 64 * 1024, `unsent ${t.host.writableLength}`);
    // A write after one that timed out waits for what is still unsent first: refused at its own deadline too.
    await assert.rejects(t.cmd.writeStdin(Buffer.from('y')), (e: WarrenError) => e.code === 'resource_exhausted');
    // The command ends: a write waiting then, or after, is a conflict.
    const waiting = t.cmd.writeStdin(Buffer.from('z'));
    t.init().write(encodeFrame(REPLY.done, encodeFields([['c', '0']])));
    await assert.rejects(waiting, (e: WarrenError) => e.code === 'conflict');
    await assert.rejects(t.cmd.writeStdin(Buffer.from('z')), (e: WarrenError) => e.code === 'conflict');
  } finally {
    await t.close();
  }
});

test('many commands that each hold their own stdin are bounded by the node’s budget, and one tenant by half of it', async () => {
  const budgets = new StdinBudgets(64 * 1024 * 1024);
  const commands = await Promise.all(
    ['a', 'a', 'a', 'b'].map((tenant) => fakeCommand(() => undefined, { readStdin: false, stdinDeadlineMs: 5000, stdin: budgets.forTenant(tenant) })),
  );
  try {
    const writes = commands.map((c) => c.cmd.writeStdin(Buffer.alloc(16 * 1024 * 1024)));
    for (const w of writes) w.catch(() => undefined);
    // Tenant a's third command is past its half (32 MiB waiting); tenant b's is not.
    await assert.rejects(writes[2]!, (e: WarrenError) => e.code === 'resource_exhausted' && e.details.maxPendingStdinBytes === 32 * 1024 * 1024);
    for (const c of commands) c.init().write(encodeFrame(REPLY.done, encodeFields([['c', '0']])));
    for (const i of [0, 1, 3]) await assert.rejects(writes[i]!, (e: WarrenError) => e.code === 'conflict', `write ${i} waited`);
    // Given back when they end: the tenant writes again.
    const again = await fakeCommand(() => undefined, { readStdin: false, stdinDeadlineMs: 200, stdin: budgets.forTenant('a') });
    commands.push(again);
    const w = again.cmd.writeStdin(Buffer.alloc(32 * 1024 * 1024));
    await assert.rejects(w, (e: WarrenError) => e.code === 'resource_exhausted' && /did not take/.test(e.message));
  } finally {
    for (const c of commands) await c.close();
  }
});

test('stdin from writes that overlap arrives whole and in order, then its end; each write answers once it is taken', async () => {
  const got: Buffer[] = [];
  let eof = false;
  const t = await fakeCommand((f, sock) => {
    if (f.type === REQ.data) got.push(Buffer.from(f.payload));
    if (f.type === REQ.eof) {
      eof = true;
      sock.write(encodeFrame(REPLY.done, encodeFields([['c', '0']])));
    }
  });
  try {
    const parts = [0, 1, 2].map((i) => Buffer.alloc(3 * 1024 * 1024 + i, 97 + i));
    await Promise.all([...parts.map((p) => t.cmd.writeStdin(p)), t.cmd.closeStdin()]);
    // The init answers at the end of stdin: everything before it came, in order.
    const end = await t.cmd.wait();
    assert.ok(end.type === 'exit' && end.exitCode === 0);
    assert.ok(eof);
    assert.ok(Buffer.concat(got).equals(Buffer.concat(parts)), 'stdin arrives whole and in order');
  } finally {
    await t.close();
  }
});

test('a follow replays retained output in pieces of at most 64 KiB, each read when asked for, in the order it came', async () => {
  const t = await fakeCommand(() => undefined);
  try {
    const init = t.init();
    const frames = 200;
    for (let i = 0; i < frames; i++) init.write(encodeFrame(i % 50 === 49 ? REPLY.stderr : REPLY.stdout, Buffer.alloc(60 * 1024, 97 + (i % 26))));
    // A character cut between two frames is whole in what is read.
    init.write(encodeFrame(REPLY.stdout, Buffer.from('é').subarray(0, 1)));
    init.write(encodeFrame(REPLY.stdout, Buffer.from('é').subarray(1)));
    init.write(encodeFrame(REPLY.done, encodeFields([['c', '0']])));
    await t.cmd.wait();
    const events: ExecEvent[] = [];
    for await (const ev of commandEvents(t.cmd, 0)) events.push(ev);
    const out = events.filter((e) => e.type === 'stdout' || e.type === 'stderr') as Array<{ type: string; data: string }>;
    assert.ok(out.length >= frames * 0.9, `${out.length} events`);
    for (const e of out) assert.ok(Buffer.byteLength(e.data) <= 64 * 1024, `an event of ${Buffer.byteLength(e.data)} bytes`);
    const stdout = out.filter((e) => e.type === 'stdout').map((e) => e.data);
    assert.equal(stdout.join(''), t.cmd.text('stdout'));
    assert.ok(t.cmd.text('stdout').endsWith('é'));
    assert.equal(out.filter((e) => e.type === 'stderr').length, 4, 'stderr where it came, not after all of stdout');
    assert.equal(events.at(-1)?.type, 'exit');
    // From an offset: what follows it.
    const late: string[] = [];
    for await (const ev of commandEvents(t.cmd, 198 * 60 * 1024)) if (ev.type === 'stdout' || ev.type === 'stderr') late.push(`${ev.type}:${ev.data}`);
    assert.deepEqual(late, [`stdout:${'q'.repeat(60 * 1024)}`, `stderr:${'r'.repeat(60 * 1024)}`, 'stdout:é']);
  } finally {
    await t.close();
  }
});

test('a follow of a running command gets what comes as it comes; one that stops leaves the command running', async () => {
  const t = await fakeCommand(() => undefined);
  try {
    const it = commandEvents(t.cmd, 0)[Symbol.asyncIterator]();
    const idle = commandEvents(t.cmd, 0)[Symbol.asyncIterator]();
    const pending = idle.next();
    t.init().write(encodeFrame(REPLY.stdout, Buffer.from('one\n')));
    assert.deepEqual((await it.next()).value, { type: 'stdout', data: 'one\n' });
    assert.deepEqual((await pending).value, { type: 'stdout', data: 'one\n' });
    const waiting = idle.next();
    await idle.return?.();
    assert.equal((await waiting).done, true, 'a reader that stops ends its pending read');
    t.init().write(encodeFrame(REPLY.stdout, Buffer.from('two\n')));
    t.init().write(encodeFrame(REPLY.done, encodeFields([['c', '3']])));
    const rest: ExecEvent[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.deepEqual(rest[0], { type: 'stdout', data: 'two\n' });
    assert.ok(rest[1]?.type === 'exit' && rest[1].exitCode === 3);
  } finally {
    await t.close();
  }
});
