import { test } from 'node:test';
import assert from 'node:assert/strict';
import { unexpected } from './routes-images.js';

test("an import's failure that is not Warren's own: a full disk is resource_exhausted; others name their code, never a path", () => {
  const sys = (code: string): Error => Object.assign(new Error(`${code}: failed, open '/var/lib/warren/layers/tmp/x'`), { code });
  assert.equal(unexpected(sys('ENOSPC')).code, 'resource_exhausted');
  assert.equal(unexpected(sys('EDQUOT')).code, 'resource_exhausted');
  const io = unexpected(sys('EIO'));
  assert.equal(io.code, 'internal');
  assert.equal(io.message, 'the import failed (EIO)');
  assert.equal(unexpected(Object.assign(new Error('x'), { code: '/etc/shadow' })).message, 'the import failed');
  assert.equal(unexpected('boom').message, 'the import failed');
  assert.equal(unexpected(null).message, 'the import failed');
});
