import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Inbox } from './inbox.js';

const probe = () => {
  const calls: string[] = [];
  const inbox = new Inbox<number>({
    size: (v) => v,
    high: 10,
    pause: () => calls.push('pause'),
    resume: () => calls.push('resume'),
    stopped: () => calls.push('stopped'),
  });
  return { inbox, calls };
};

test('the source is paused past the high mark and resumed once half of it is read', async () => {
  const { inbox, calls } = probe();
  for (const v of [4, 4, 4]) inbox.push(v);
  assert.deepEqual(calls, ['pause']);
  const it = inbox[Symbol.asyncIterator]();
  assert.equal((await it.next()).value, 4);
  assert.deepEqual(calls, ['pause'], 'still 8 queued');
  assert.equal((await it.next()).value, 4);
  assert.deepEqual(calls, ['pause', 'resume']);
  inbox.end(new Error('cut'));
  assert.equal((await it.next()).value, 4, 'what was queued is read before the error');
  await assert.rejects(it.next(), /cut/);
});

test('a reader that stops early tells the source; the end of a paused source frees it; discard drops all', async () => {
  const a = probe();
  const it = a.inbox[Symbol.asyncIterator]();
  const pending = it.next();
  await it.return?.();
  assert.deepEqual(await pending, { value: undefined, done: true });
  assert.deepEqual(a.calls, ['stopped']);
  const b = probe();
  b.inbox.push(20);
  b.inbox.end();
  assert.deepEqual(b.calls, ['pause', 'resume']);
  const c = probe();
  c.inbox.push(20);
  c.inbox.discard();
  c.inbox.push(1);
  assert.deepEqual(c.calls, ['pause', 'resume']);
  assert.deepEqual(await c.inbox[Symbol.asyncIterator]().next(), { value: undefined, done: true });
});
