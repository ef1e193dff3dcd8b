import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { checkRoom, defaultReserveBytes, sandboxFsMkfsArgs, sandboxImageBytes } from './data-disk.js';

const MiB = 2 ** 20;

test('the reserve: 5 % of the disk, within 256 MiB and 2 GiB; the sandboxes image leaves it', () => {
  assert.equal(defaultReserveBytes(1024 * MiB), 256 * MiB);
  assert.equal(defaultReserveBytes(20 * 1024 * MiB), 1024 * MiB);
  assert.equal(defaultReserveBytes(10 * 1024 * 1024 * MiB), 2048 * MiB);
  assert.equal(sandboxImageBytes(1256 * MiB, 256 * MiB), 800 * MiB);
  assert.equal(sandboxImageBytes(100 * MiB, 256 * MiB), 256 * MiB);
});

test("a small sandboxes' image keeps data and metadata in mixed block groups, a large one apart", () => {
  assert.deepEqual(sandboxFsMkfsArgs(256 * MiB), ['-q', '--mixed', '-d', 'single', '-m', 'single']);
  assert.deepEqual(sandboxFsMkfsArgs(5 * 1024 * MiB - 1), ['-q', '--mixed', '-d', 'single', '-m', 'single']);
  assert.deepEqual(sandboxFsMkfsArgs(5 * 1024 * MiB), ['-q', '-m', 'single']);
});

test('layers are refused when what is free, less what the sandboxes may still take, is under the reserve', () => {
  checkRoom({ freeBytes: 2000 * MiB, promisedBytes: 1000 * MiB, sizeBytes: 4000 * MiB }, 512 * MiB, 'an import');
  assert.throws(
    () => checkRoom({ freeBytes: 2000 * MiB, promisedBytes: 1600 * MiB, sizeBytes: 4000 * MiB }, 512 * MiB, 'an import'),
    (e: WarrenError) => e.code === 'resource_exhausted' && /data disk is full: 400 MiB free/.test(e.message) && e.details.reserveMiB === 512,
  );
});
