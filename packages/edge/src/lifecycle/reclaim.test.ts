import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Semaphore } from '../util/semaphore.js';
import { startReclaim, stopReclaim } from './reclaim.js';
import type { Live } from './live.js';
import type { Backend } from '../backends/backend.js';

test('page-outs wait their turn (two at a time); one stopped while it waits is done at once, one running is waited for', async () => {
  const running: string[] = [];
  const finish = new Map<string, () => void>();
  const backend = {
    reclaim: (id: string, signal: AbortSignal) =>
      new Promise<number>((resolve) => {
        running.push(id);
        const end = (): void => resolve(1234);
        finish.set(id, end);
        signal.addEventListener('abort', end, { once: true });
      }),
  } as unknown as Backend;
  const gate = new Semaphore(2);
  const lives = ['a', 'b', 'c'].map(() => ({ reclaim: null, residentWhilePaused: 0 }) as unknown as Live);
  ['a', 'b', 'c'].forEach((id, i) => startReclaim(backend, id, lives[i]!, { gate }));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(running, ['a', 'b']);
  // c waits behind a and b: stopped (a resume), it is done without waiting for them.
  await stopReclaim(lives[2]!);
  assert.equal(lives[2]!.reclaim, null);
  // a runs: stopping it waits until its page-out has ended.
  await stopReclaim(lives[0]!);
  finish.get('b')!();
  await lives[1]!.reclaim?.done;
  assert.equal(lives[1]!.residentWhilePaused, 1234);
  assert.deepEqual(running, ['a', 'b'], 'the stopped one never ran');
});
