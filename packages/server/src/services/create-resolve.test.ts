import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type WarrenError } from '@warren/api';
import { checkNetwork, cpuClassFor, type ResolveParts } from './create-resolve.js';
import type { Caller } from './sandboxes.js';

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

test("a sandbox's endpoints: a create naming none does not read the nodes' (made anew from every node's); one naming an endpoint no node offers is refused, naming those offered", () => {
  let reads = 0;
  const parts = {
    cluster: {
      networking: () => true,
      endpoints: () => {
        reads++;
        return new Set(['db', 'cache']);
      },
    },
  } as unknown as ResolveParts;
  const caller = { role: 'user', quota: {} } as unknown as Caller;
  assert.deepEqual(checkNetwork(parts, caller, { egress: 'deny' }), { egress: 'deny', allow: [], deny: [] });
  assert.equal(reads, 0);
  assert.deepEqual(checkNetwork(parts, caller, { egress: 'deny', endpoints: ['db'] }).endpoints, ['db']);
  assert.throws(
    () => checkNetwork(parts, caller, { egress: 'deny', endpoints: ['queue'] }),
    (e: WarrenError) => e.code === 'invalid_argument' && JSON.stringify(e.details.endpoints) === '["cache","db"]',
  );
  assert.equal(reads, 2);
});
