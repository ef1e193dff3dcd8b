import { test } from 'node:test';
import assert from 'node:assert/strict';
import { errnoError } from './errno.js';

test('a sandbox at its own process, memory or file limit is resource_exhausted, not an internal fault', () => {
  for (const errno of [11, 12, 23, 24]) {
    const e = errnoError(errno, 'exec: Resource temporarily unavailable', { path: '/x' });
    assert.equal(e.code, 'resource_exhausted', String(errno));
    assert.equal(e.message, 'exec: Resource temporarily unavailable');
    assert.deepEqual(e.details, { path: '/x', errno });
  }
  assert.equal(errnoError(2, '').code, 'not_found');
  assert.equal(errnoError(2, '').message, 'no such file or directory');
  assert.equal(errnoError(9999, '').code, 'internal');
});
