import { test } from 'node:test';
import assert from 'node:assert/strict';
import { END_FRAME, FRAME, FrameReader, frameHeader, textFrame, type FrameType } from './frames.js';

const read = (r: FrameReader, chunks: Buffer[]): Array<[FrameType, string]> => {
  const out: Array<[FrameType, string]> = [];
  for (const c of chunks)
    r.push(c, (t, p) => {
      // The pieces of one data frame, joined again.
      const last = out[out.length - 1];
      if (t === FRAME.data && last?.[0] === FRAME.data) last[1] += p.toString();
      else out.push([t, p.toString()]);
    });
  return out;
};

test('frames come out whole and in order however the bytes are cut (a data frame as pieces, never copied)', () => {
  const big = 'x'.repeat(70_000);
  const wire = Buffer.concat([
    textFrame(FRAME.call, '{"c":"info"}'),
    frameHeader(FRAME.data, 3),
    Buffer.from('abc'),
    END_FRAME,
    textFrame(FRAME.item, big),
    textFrame(FRAME.result, 'ü'),
  ]);
  const want: Array<[FrameType, string]> = [
    [FRAME.call, '{"c":"info"}'],
    [FRAME.data, 'abc'],
    [FRAME.end, ''],
    [FRAME.item, big],
    [FRAME.result, 'ü'],
  ];
  assert.deepEqual(read(new FrameReader(1 << 20), [wire]), want);
  for (const size of [1, 2, 5, 7, 4096]) {
    const chunks: Buffer[] = [];
    for (let at = 0; at < wire.length; at += size) chunks.push(wire.subarray(at, at + size));
    assert.deepEqual(read(new FrameReader(1 << 20), chunks), want, `cut every ${size} bytes`);
  }
  const pieces: Buffer[] = [];
  const body = Buffer.concat([frameHeader(FRAME.data, 6), Buffer.from('abcdef')]);
  new FrameReader(10).push(body, (_t, p) => pieces.push(p));
  assert.equal(pieces[0]!.buffer, body.buffer, 'a data frame is a view of what arrived');
});

test('a frame over the limit or of no known type is refused before its payload is held', () => {
  assert.throws(() => read(new FrameReader(10), [frameHeader(FRAME.data, 11)]), /over the 10 allowed/);
  const bad = Buffer.from([0, 0, 0, 0, 9]);
  assert.throws(() => read(new FrameReader(10), [bad]), /no frame type 9/);
  assert.deepEqual(read(new FrameReader(10), [frameHeader(FRAME.data, 10)]), [], 'a frame at the limit waits for its bytes');
});

test('a reader detached on a frame hands back the raw bytes that came after it, and takes no more frames', () => {
  const r = new FrameReader(1024);
  let rest: Buffer | null = null;
  const seen: FrameType[] = [];
  // The edge's answer and the sandbox's first bytes in one chunk: those bytes are not frames.
  r.push(Buffer.concat([textFrame(FRAME.result, '{"r":null}'), Buffer.from('HTTP/1.1 101\r\n')]), (t) => {
    seen.push(t);
    rest = r.detach();
  });
  assert.deepEqual(seen, [FRAME.result]);
  assert.equal(String(rest), 'HTTP/1.1 101\r\n');
  assert.throws(() => r.push(Buffer.from('x'), () => undefined));
});
