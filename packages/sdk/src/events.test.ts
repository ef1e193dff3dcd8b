import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serverSentEvents } from './events.js';

async function* chunks(...parts: string[]): AsyncGenerator<Uint8Array> {
  for (const p of parts) yield new TextEncoder().encode(p);
}

test('server-sent events: fields split across chunks, comments skipped, data lines joined, CRLF and a last id', async () => {
  const got = [];
  for await (const m of serverSentEvents(
    chunks(': hello\n\nid: 1\nevent: crea', 'ted\ndata: {"a":\ndata: 1}\n\n', 'id: 2\r\ndata:x\r\n\r\n', ': keepalive\n\n', 'data: cut'),
  ))
    got.push(m);
  assert.deepEqual(got, [
    { id: '1', event: 'created', data: '{"a":\n1}' },
    { id: '2', event: 'message', data: 'x' },
  ]);
});
