import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { REPLY, encodeFields, type Frame } from '../init/frame.js';
import { Command, type CommandCall } from './command.js';

/** A call that answers `frames`, then the end of the connection. */
function callOf(frames: Frame[]): CommandCall {
  let closed = false;
  return {
    next: () => Promise.resolve(frames.shift() ?? null),
    send: () => !closed,
    close: () => void (closed = true),
    drain: () => Promise.resolve(closed ? 'closed' : 'drained'),
    get closed() {
      return closed;
    },
  };
}

const what = { cmd: 'echo hi', cwd: null, env: {}, tag: null, pty: false };

test('Command: a finished command lets its call go (it is kept for minutes after, its call and socket need not be)', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const { cmd, ref } = ((): { cmd: Command; ref: WeakRef<CommandCall> } => {
    const call = callOf([
      { type: REPLY.stdout, payload: Buffer.from('hi\n') },
      { type: REPLY.done, payload: encodeFields([['c', '0']]) },
    ]);
    return { cmd: new Command('c1', 7, what, call, 1024, () => undefined), ref: new WeakRef(call) };
  })();
  await cmd.pump();
  await new Promise((r) => setImmediate(r));
  gc();
  assert.equal(ref.deref(), undefined, 'the finished command still holds its call');
  // What it keeps is its own: the output and the exit, for a re-read.
  assert.equal(cmd.text('stdout'), 'hi\n');
  assert.equal(cmd.exit?.exitCode, 0);
  await assert.rejects(cmd.writeStdin(Buffer.from('x')), { code: 'conflict' });
  await cmd.signal('SIGTERM');
});
