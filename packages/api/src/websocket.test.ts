import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WS_OPCODE, WsDecoder, WsProtocolError, wsAccept, wsClosePayload, wsFrame } from './websocket.js';

test('the accept key is the one RFC 6455 gives for its example key', () => {
  assert.equal(wsAccept('dGhlIHNhbXBsZSBub25jZQ=='), 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
});

test('frames of each length form round-trip, masked (a client) and not (a server), in any pieces', () => {
  for (const len of [0, 5, 125, 126, 65535, 65536, 200_000]) {
    const payload = Buffer.alloc(len, 0x61 + (len % 26));
    for (const mask of [true, false]) {
      const frame = wsFrame(WS_OPCODE.binary, payload, mask);
      assert.equal(frame.length, len + (len < 126 ? 2 : len < 65536 ? 4 : 10) + (mask ? 4 : 0));
      if (mask && len) assert.notDeepEqual(frame.subarray(frame.length - len), payload, 'a masked payload is not sent as is');
      const d = new WsDecoder(mask, 1024 * 1024);
      const got = [];
      // Byte by byte for the short ones, in 7-byte pieces for the others.
      const step = len < 200 ? 1 : 7001;
      for (let i = 0; i < frame.length; i += step) got.push(...d.push(frame.subarray(i, i + step)));
      assert.equal(got.length, 1);
      assert.equal(got[0]!.opcode, WS_OPCODE.binary);
      assert.deepEqual(got[0]!.payload, payload);
    }
  }
});

test('fragments join into one message; control frames may come between them', () => {
  const part = (fin: boolean, opcode: number, s: string): Buffer => {
    const f = wsFrame(opcode, Buffer.from(s), true);
    if (!fin) f[0]! &= 0x7f;
    return f;
  };
  const d = new WsDecoder(true);
  const got = d.push(Buffer.concat([part(false, WS_OPCODE.text, 'he'), part(true, WS_OPCODE.ping, 'p'), part(false, 0, 'll'), part(true, 0, 'o')]));
  assert.deepEqual(
    got.map((m) => [m.opcode, m.payload.toString()]),
    [
      [WS_OPCODE.ping, 'p'],
      [WS_OPCODE.text, 'hello'],
    ],
  );
});

test('what RFC 6455 forbids, and messages past the bound, are errors with their close codes', () => {
  const bad = (masked: boolean, bytes: Buffer, max = 1024): number => {
    try {
      new WsDecoder(masked, max).push(bytes);
    } catch (e) {
      assert.ok(e instanceof WsProtocolError);
      return e.closeCode;
    }
    return 0;
  };
  assert.equal(bad(true, wsFrame(WS_OPCODE.binary, Buffer.from('x'), false)), 1002, 'an unmasked client frame');
  assert.equal(bad(false, wsFrame(WS_OPCODE.binary, Buffer.from('x'), true)), 1002, 'a masked server frame');
  assert.equal(bad(true, wsFrame(WS_OPCODE.binary, Buffer.alloc(2000), true)), 1009, 'too big');
  const big = wsFrame(WS_OPCODE.binary, Buffer.alloc(10), true);
  big[1] = 0x80 | 127;
  assert.equal(
    bad(true, Buffer.concat([big.subarray(0, 2), Buffer.from([0xff, 0, 0, 0, 0, 0, 0, 0])])),
    1009,
    'a 64-bit length past the bound, before its bytes come',
  );
  const rsv = wsFrame(WS_OPCODE.binary, Buffer.from('x'), true);
  rsv[0]! |= 0x40;
  assert.equal(bad(true, rsv), 1002, 'a reserved bit');
  const longPing = wsFrame(WS_OPCODE.ping, Buffer.alloc(126), true);
  assert.equal(bad(true, longPing), 1002, 'a control frame over 125 bytes');
  assert.equal(bad(true, wsFrame(0, Buffer.from('x'), true)), 1002, 'a continuation of nothing');
  assert.equal(bad(true, wsFrame(3, Buffer.from('x'), true)), 1002, 'an unknown opcode');
  const pieces = [wsFrame(WS_OPCODE.text, Buffer.alloc(600), true), wsFrame(0, Buffer.alloc(600), true)];
  pieces[0]![0]! &= 0x7f;
  assert.equal(bad(true, Buffer.concat(pieces)), 1009, 'fragments past the bound together');
});

test('a close payload carries its code and at most 123 bytes of reason', () => {
  const p = wsClosePayload(1011, 'x'.repeat(500));
  assert.equal(p.readUInt16BE(0), 1011);
  assert.equal(p.length, 125);
});

/** A frame with FIN cleared (a fragment that more follow). */
const unfinished = (opcode: number, payload: Buffer, mask = true): Buffer => {
  const f = wsFrame(opcode, payload, mask);
  f[0]! &= 0x7f;
  return f;
};

test('a message in more frames than the bound is an error (1009), empty ones counted: the W3-02 probe', () => {
  // The probe: a text frame without FIN, then endless empty masked continuations (6 bytes each).
  const d = new WsDecoder(true, 1024 * 1024);
  const empty = unfinished(0, Buffer.alloc(0));
  const batch = Buffer.concat([unfinished(WS_OPCODE.text, Buffer.alloc(0)), ...Array.from({ length: 10_000 }, () => empty)]);
  assert.throws(
    () => d.push(batch),
    (e: unknown) => e instanceof WsProtocolError && e.closeCode === 1009 && /more than 1024 frames/.test(e.message),
  );
  // At the bound it is still one message.
  const ok = new WsDecoder(true, 1024 * 1024, 3);
  const got = ok.push(Buffer.concat([unfinished(WS_OPCODE.binary, Buffer.from('a')), unfinished(0, Buffer.alloc(0)), wsFrame(0, Buffer.from('b'), true)]));
  assert.deepEqual(
    got.map((m) => [m.opcode, m.payload.toString()]),
    [[WS_OPCODE.binary, 'ab']],
  );
  // The count starts again with the next message.
  assert.equal(ok.push(Buffer.concat([unfinished(WS_OPCODE.binary, Buffer.from('c')), wsFrame(0, Buffer.from('d'), true)]))[0]!.payload.toString(), 'cd');
  assert.throws(
    () => ok.push(Buffer.concat([unfinished(WS_OPCODE.binary, Buffer.from('a')), ...Array.from({ length: 3 }, () => unfinished(0, Buffer.alloc(0)))])),
    (e: unknown) => e instanceof WsProtocolError && e.closeCode === 1009,
  );
});

test('a continuation that would take the message past the bound fails at its header, before its bytes come', () => {
  const d = new WsDecoder(true, 1000);
  const head = wsFrame(0, Buffer.alloc(600), true).subarray(0, 8);
  assert.deepEqual(d.push(unfinished(WS_OPCODE.binary, Buffer.alloc(600))), []);
  assert.throws(
    () => d.push(head),
    (e: unknown) => e instanceof WsProtocolError && e.closeCode === 1009,
  );
});

test('a big frame in many small pieces is joined once, not once per piece (linear, not quadratic)', () => {
  // 16 MiB in 256-byte pieces: joining what is buffered on every piece copies ~512 GiB.
  const payload = Buffer.alloc(16 * 1024 * 1024, 0x62);
  const frame = wsFrame(WS_OPCODE.binary, payload, true);
  const d = new WsDecoder(true, payload.length);
  const started = performance.now();
  const got = [];
  for (let i = 0; i < frame.length; i += 256) {
    got.push(...d.push(frame.subarray(i, i + 256)));
    // Checked as it goes: the test is synchronous, so its timeout could not stop it.
    if (performance.now() - started > 10_000) assert.fail(`still joining after 10 s, at byte ${i} of ${frame.length}`);
  }
  assert.equal(got.length, 1);
  assert.ok(got[0]!.payload.equals(payload));
});

test('a frame in a million one-byte pieces is held as its bytes, not as an object per piece', () => {
  const payload = Buffer.alloc(1024 * 1024, 0x63);
  const frame = wsFrame(WS_OPCODE.binary, payload, true);
  const d = new WsDecoder(true, payload.length);
  const held = (): number => process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers;
  const before = held();
  // All but the last byte: the decoder holds the whole partial frame.
  const started = performance.now();
  for (let i = 0; i < frame.length - 1; i++) {
    assert.equal(d.push(frame.subarray(i, i + 1)).length, 0);
    if ((i & 4095) === 0 && performance.now() - started > 10_000) assert.fail(`still taking pieces after 10 s, at byte ${i} of ${frame.length}`);
  }
  const grew = held() - before;
  assert.ok(grew < 16 * 1024 * 1024, `holding a 1 MiB partial frame grew the heap by ${grew >> 20} MiB`);
  const got = d.push(frame.subarray(frame.length - 1));
  assert.equal(got.length, 1);
  assert.ok(got[0]!.payload.equals(payload));
});
