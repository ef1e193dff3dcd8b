import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError, parseError, serializeError } from './errors.js';

test('serialize and parse round-trip a WarrenError', () => {
  const { status, body } = serializeError(new WarrenError('not_found', 'no such sandbox', { id: 'sb_1' }));
  assert.equal(status, 404);
  const back = parseError(status, body);
  assert.equal(back.code, 'not_found');
  assert.equal(back.message, 'no such sandbox');
  assert.deepEqual(back.details, { id: 'sb_1' });
});

test('unknown errors become internal without leaking their message', () => {
  const { status, body } = serializeError(new Error('/var/lib/secret path'));
  assert.equal(status, 500);
  assert.equal(body.error.code, 'internal');
  assert.doesNotMatch(JSON.stringify(body), /secret/);
});

test('a body without an error maps the status to a code', () => {
  assert.equal(parseError(429, 'x').code, 'resource_exhausted');
  assert.equal(parseError(418, null).code, 'internal');
});
