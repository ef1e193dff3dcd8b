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
