import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { Router } from './router.js';

test('routes match params and tell a wrong method from a missing path', async () => {
  const r = new Router();
  const h = async (): Promise<void> => undefined;
  r.add({ method: 'GET', path: '/v1/sandboxes/{id}' }, h);
  r.add({ method: 'POST', path: '/v1/sandboxes/batch' }, h);
  const m = r.match('GET', '/v1/sandboxes/sb_1');
  assert.ok(m && m !== 'method');
  assert.deepEqual(m.params, { id: 'sb_1' });
  assert.equal(r.match('PUT', '/v1/sandboxes/sb_1'), 'method');
  assert.equal(r.match('GET', '/v1/nothing'), null);
  assert.equal(r.match('GET', '/v1/sandboxes/a/b'), null);
  // A malformed escape is the caller's error, not the server's.
  assert.throws(
    () => r.match('GET', '/v1/sandboxes/%E0%A4%A'),
    (e: WarrenError) => e.code === 'invalid_argument',
  );
});
