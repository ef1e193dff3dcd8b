import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Hangup } from './hangup.js';

test('Hangup: a race answers the value, or gone once the connection closes (and every race after)', async () => {
  const conn = new EventEmitter();
  const h = new Hangup(conn);
  assert.equal(await h.race(Promise.resolve(1)), 1);
  const never = h.race(new Promise<number>(() => undefined));
  conn.emit('close');
  assert.equal(await never, 'gone');
  assert.equal(h.gone, true);
  assert.equal(await h.race(Promise.resolve(2)), 'gone');
  await assert.rejects(new Hangup(new EventEmitter()).race(Promise.reject(new Error('x'))), /x/);
});

test('Hangup: values raced while the connection lives are not held by it (Promise.race with one long-lived promise held them all)', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const conn = new EventEmitter();
  const h = new Hangup(conn);
  gc();
  const before = process.memoryUsage().heapUsed;
  // 64 MiB of values, each raced once and dropped.
  for (let i = 0; i < 1024; i++) await h.race(Promise.resolve(randomBytes(48 * 1024).toString('base64')));
  gc();
  const grown = process.memoryUsage().heapUsed - before;
  assert.ok(grown < 8 * 1024 * 1024, `the heap grew by ${(grown / 1048576).toFixed(1)} MiB`);
  conn.emit('close');
});
