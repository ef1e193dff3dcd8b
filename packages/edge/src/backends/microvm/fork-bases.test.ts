import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MicrovmForkBases } from './fork-bases.js';

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
