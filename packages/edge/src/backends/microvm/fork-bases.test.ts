import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MicrovmForkBases, scratchRoom } from './fork-bases.js';

const A = 'fb_' + 'a'.repeat(24);
const B = 'fb_' + 'b'.repeat(24);

/** Rejects with a WarrenError of `code`. */
const code = (c: string) => (e: Error & { code?: string }) => e.code === c;

test('MicrovmForkBases: whole bases are listed and found, half-made ones swept, a base removed by its id only', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-forkbases-'));
  try {
    // A whole base (its state written), one left half made by a crash, and files that are no base.
    for (const d of [A, `${B}.partial`, 'not-a-base']) await mkdir(join(dir, d));
    await writeFile(join(dir, A, 'state'), 'x');
    const bases = new MicrovmForkBases(dir);
    assert.deepEqual(await bases.list(), [A]);
    assert.ok(!existsSync(join(dir, `${B}.partial`)), 'the half-made base is swept');
    assert.equal(await bases.path(A), join(dir, A));
    await assert.rejects(bases.path(B), code('not_found'));
    await assert.rejects(bases.path('../etc'), code('invalid_argument'));
    // A base that exists is not made again over it (before any QEMU starts).
    await assert.rejects(bases.make(A, '/nonexistent', false), code('conflict'));
    await bases.remove('not-a-base');
    await bases.remove(B);
    await bases.remove(A);
    assert.deepEqual((await readdir(dir)).sort(), ['not-a-base']);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('MicrovmForkBases: a freeze that fails leaves no base and no partial directory', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-forkbases-'));
  try {
    const bases = new MicrovmForkBases(dir);
    // A source that is no microVM (saved, but with no disk or state): the copy of its disk fails.
    await assert.rejects(bases.make(A, join(dir, 'missing-source'), true), code('internal'));
    assert.deepEqual(await readdir(dir), []);
    assert.deepEqual(await bases.list(), []);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('freezes at once share the tmpfs they take a guest’s memory in: each counts what the others may still write', async () => {
  const mib = 2 ** 20;
  // 1,000 MiB free: one freeze of a 400 MiB guest fits (it asks twice that), a second at once does not.
  const stat = async (): Promise<{ type: number; bavail: number; bsize: number }> => ({ type: 0x01021994, bavail: 1000 * mib, bsize: 1 });
  const first = await scratchRoom(400, stat);
  assert.ok(first);
  assert.equal(await scratchRoom(400, stat), null);
  // A small one still fits beside it; given back, the second fits too.
  const small = await scratchRoom(50, stat);
  assert.ok(small);
  small.release();
  first.release();
  first.release();
  const second = await scratchRoom(400, stat);
  assert.ok(second);
  second.release();
  // Not tmpfs: none.
  assert.equal(await scratchRoom(1, async () => ({ type: 0xef53, bavail: 1e12, bsize: 1 })), null);
});
