import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MicrovmTemplates, templateName, type TemplateKey } from './templates.js';

const key: TemplateKey = {
  kernel: '/k/vmlinuz',
  initrd: '/k/initrd-1',
  layers: [{ meta: '/l/a', data: null }],
  cpus: 1,
  memoryMiB: 256,
  diskMiB: 1024,
  accel: 'tcg',
};

test('templateName: the same key names the same template; any field changed names another', () => {
  assert.equal(templateName(key), templateName({ ...key, layers: [{ meta: '/l/a', data: null }] }));
  const others = [
    { ...key, kernel: '/k2' },
    { ...key, initrd: '/k/initrd-2' },
    { ...key, layers: [{ meta: '/l/a', data: '/l/a.data' }] },
    { ...key, cpus: 2 },
    { ...key, memoryMiB: 512 },
    { ...key, diskMiB: 64 },
    { ...key, accel: 'kvm' },
    { ...key, idShift: { base: 100000, size: 65536 } },
  ].map(templateName);
  assert.equal(new Set([templateName(key), ...others]).size, others.length + 1);
});

/** A `make` that writes one file and counts its calls; `fail` makes the next one throw halfway. */
function maker(): { make: (dir: string) => Promise<void>; calls: () => number; fail: () => void } {
  let calls = 0;
  let failNext = false;
  return {
    make: async (dir) => {
      calls++;
      await writeFile(join(dir, 'state'), 'x');
      if (failNext) {
        failNext = false;
        throw new Error('boot failed');
      }
    },
    calls: () => calls,
    fail: () => (failNext = true),
  };
}

test('MicrovmTemplates: made once for creates at once, found again by a new instance, remade after the host reboots', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-templates-'));
  try {
    const m = maker();
    const t = new MicrovmTemplates(dir);
    const seen = await Promise.all(Array.from({ length: 5 }, () => t.with('a', m.make, async (d) => d)));
    assert.equal(m.calls(), 1);
    assert.deepEqual(new Set(seen), new Set([join(dir, 'a')]));
    assert.deepEqual(await t.list(), ['a']);
    // An edge restarted: the template on disk is used as it is.
    await new MicrovmTemplates(dir).with('a', m.make, async () => undefined);
    assert.equal(m.calls(), 1);
    // Made in another boot of the host: made again.
    await writeFile(join(dir, 'a', 'ready'), 'another-boot');
    await new MicrovmTemplates(dir).with('a', m.make, async () => undefined);
    assert.equal(m.calls(), 2);
    assert.equal(await readFile(join(dir, 'a', 'ready'), 'utf8'), (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim());
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('MicrovmTemplates: a make that fails leaves nothing and the next create makes it again; drop removes one', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-templates-'));
  try {
    const m = maker();
    const t = new MicrovmTemplates(dir);
    m.fail();
    await assert.rejects(
      t.with('a', m.make, async () => undefined),
      /boot failed/,
    );
    assert.deepEqual(readdirSync(dir), []);
    await t.with('a', m.make, async () => undefined);
    assert.equal(m.calls(), 2);
    await t.drop('a');
    assert.equal(existsSync(join(dir, 'a')), false);
    await t.with('a', m.make, async () => undefined);
    assert.equal(m.calls(), 3);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('MicrovmTemplates: at most `max` kept, the least recently used idle one removed first, never one being cloned', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-templates-'));
  try {
    const m = maker();
    const t = new MicrovmTemplates(dir, 2);
    await t.with('a', m.make, async () => undefined);
    await new Promise((r) => setTimeout(r, 5));
    let release!: () => void;
    const held = t.with('b', m.make, () => new Promise<void>((r) => (release = r)));
    await new Promise((r) => setTimeout(r, 20));
    await t.with('c', m.make, async () => undefined);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual((await t.list()).sort(), ['b', 'c'], 'a was the least recently used');
    await t.with('d', m.make, async () => undefined);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual((await t.list()).sort(), ['b', 'd'], 'b is being cloned: c goes instead');
    release();
    await held;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
