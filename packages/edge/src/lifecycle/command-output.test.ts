import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ExecEvent } from '@warren/api';
import { CommandOutput } from './command-output.js';

const exit: ExecEvent = { type: 'exit', exitCode: 0, signal: null, durationMs: 1, timedOut: false, truncated: true, killedBy: null, limitsHit: [] };

async function all(it: AsyncIterable<ExecEvent>): Promise<string> {
  let s = '';
  for await (const ev of it) if (ev.type === 'stdout' || ev.type === 'stderr') s += ev.data;
  return s;
}

test('trimTo drops the oldest output a chunk at a time; readers and offsets go by the whole output', async () => {
  const out = new CommandOutput();
  for (const w of ['aaaa', 'bbbb', 'cccc', 'dddd']) out.add('stdout', Buffer.from(w));
  assert.equal(out.trimTo(9), 8);
  assert.equal(out.length, 8);
  assert.equal(out.text('stdout'), 'ccccdddd');
  out.end(exit);
  // A reader from before what is retained goes on from the oldest retained; an offset inside it is exact.
  assert.equal(await all(out.events(0)), 'ccccdddd');
  assert.equal(await all(out.events(10)), 'ccdddd');
  assert.equal(await all(out.events(99)), '');
});

test('a reader that falls behind the trimmed output skips to the oldest retained; one that keeps up misses nothing', async () => {
  const out = new CommandOutput();
  const slow = out.events(0)[Symbol.asyncIterator]();
  const fast = out.events(0)[Symbol.asyncIterator]();
  let seen = '';
  let expected = '';
  // 3,000 chunks: the retained array is cut more than once, under both readers.
  for (let i = 0; i < 3000; i++) {
    const w = `${i}\n`;
    expected += w;
    out.add(i % 7 ? 'stdout' : 'stderr', Buffer.from(w));
    out.trimTo(100);
    const ev = (await fast.next()).value as ExecEvent;
    assert.ok(ev.type === 'stdout' || ev.type === 'stderr');
    seen += ev.data;
    if (i === 10) {
      const first = (await slow.next()).value as ExecEvent;
      assert.ok(first.type === 'stdout' || first.type === 'stderr');
    }
  }
  out.end(exit);
  assert.equal(seen, expected);
  let rest = '';
  for (;;) {
    const r = await slow.next();
    if (r.done) break;
    if (r.value.type === 'stdout' || r.value.type === 'stderr') rest += r.value.data;
  }
  assert.ok(rest.length <= 100 && expected.endsWith(rest) && rest.startsWith('2'), JSON.stringify(rest));
  assert.ok(out.length <= 100 && expected.endsWith(out.text('stdout').slice(-10)), String(out.length));
});
