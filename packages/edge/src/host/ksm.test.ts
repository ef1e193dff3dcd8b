import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { enableKsm, ksmSettings } from './ksm.js';

test('enableKsm: writes its settings with run last, and its close puts back what was there', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-ksm-'));
  try {
    const before = { pages_to_scan: '100', sleep_millisecs: '20', use_zero_pages: '0', run: '0' };
    for (const [k, v] of Object.entries(before)) await writeFile(join(dir, k), `${v}\n`);
    assert.deepEqual(ksmSettings({ pagesToScan: 1000, sleepMs: 20 }).at(-1), ['run', '1']);
    const k = await enableKsm({ pagesToScan: 1000, sleepMs: 50 }, dir);
    assert.ok(k);
    assert.equal(await readFile(join(dir, 'pages_to_scan'), 'utf8'), '1000');
    assert.equal(await readFile(join(dir, 'sleep_millisecs'), 'utf8'), '50');
    assert.equal(await readFile(join(dir, 'run'), 'utf8'), '1');
    await k.close();
    for (const [name, v] of Object.entries(before)) assert.equal(await readFile(join(dir, name), 'utf8'), v);
    // No KSM here: null, and nothing left changed.
    await rm(join(dir, 'run'));
    assert.equal(await enableKsm(undefined, dir), null);
    assert.equal(await readFile(join(dir, 'pages_to_scan'), 'utf8'), '100');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
