import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type WarrenError } from '@warren/api';
import { cpuClassFor } from './create-resolve.js';

test("a sandbox's CPU class: the request's, latency by default; a key marked batch gets batch and may not ask for latency", () => {
  assert.equal(cpuClassFor({ quota: {} }, undefined), 'latency');
  assert.equal(cpuClassFor({ quota: {} }, 'batch'), 'batch');
  assert.equal(cpuClassFor({ quota: { cpuClass: 'batch' } }, undefined), 'batch');
  assert.equal(cpuClassFor({ quota: { cpuClass: 'batch' } }, 'batch'), 'batch');
  assert.throws(
    () => cpuClassFor({ quota: { cpuClass: 'batch' } }, 'latency'),
    (e: WarrenError) => e.code === 'permission_denied',
  );
  // A key marked latency is no mark: it may ask for batch.
  assert.equal(cpuClassFor({ quota: { cpuClass: 'latency' } }, 'batch'), 'batch');
});
