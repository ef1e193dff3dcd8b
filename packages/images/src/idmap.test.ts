import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_ID_MAP, shiftId } from './idmap.js';

test('ids inside the range shift by the host start; others become nobody', () => {
  assert.equal(shiftId(0, DEFAULT_ID_MAP), 100000);
  assert.equal(shiftId(1000, DEFAULT_ID_MAP), 101000);
  assert.equal(shiftId(70000, DEFAULT_ID_MAP), 100000 + 65534);
});
