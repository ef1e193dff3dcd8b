import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CLI, ownedTempDir, startTestWarren, type TestWarren } from './harness.js';
import { makeTar } from './tar-writer.js';

const run = promisify(execFile);
const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;
let t: TestWarren;
let dir = '';
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
  dir = await ownedTempDir('cli-images-');
});
after(async () => {
  await t?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test('warren images import, layers push, create --layer, commit, images rm (refused while used, --force)', async () => {
  const env = { ...process.env, WARREN_URL: t.url, WARREN_API_KEY: t.key };
  const w = async (...args: string[]): Promise<{ stdout: string; stderr: string }> => run(process.execPath, [CLI, ...args], { env });
  const layer = makeTar([
    { path: 'bin/', type: 'dir' },
    { path: 'bin/busybox', content: await readFile('/bin/busybox'), mode: 0o755 },
    { path: 'bin/sh', type: 'symlink', linkname: 'busybox' },
    { path: 'bin/cat', type: 'symlink', linkname: 'busybox' },
    { path: 'motd', content: 'imported\n' },
  ]);
  const config = Buffer.from(JSON.stringify({ rootfs: { type: 'layers', diff_ids: [sha(layer)] } }));
  const archive = join(dir, 'app.tar');
  await writeFile(
    archive,
    makeTar([
      { path: 'config.json', content: config },
      { path: 'l0/layer.tar', content: layer },
      { path: 'manifest.json', content: JSON.stringify([{ Config: 'config.json', Layers: ['l0/layer.tar'] }]) },
    ]),
  );
  const imported = await w('images', 'import', archive, '--name', 'cli/app:1');
  assert.match(imported.stdout, /^cli\/app:1 {2}1 layers/);
  assert.match(imported.stderr, /layer 1\/1/);
  assert.match((await w('images')).stdout, /cli\/app:1/);

  const tool = join(dir, 'tool.tar');
  await writeFile(tool, makeTar([{ path: 'opt/tool', content: 'tool v7\n' }]));
  assert.match((await w('layers', 'push', tool, '--name', 'toolkit/v7')).stdout, /^toolkit\/v7 {2}sha256:/);
  const id = (await w('create', 'cli/app:1', '--layer', 'toolkit/v7')).stdout.trim();
  assert.equal((await w('exec', id, '--', 'cat /motd /opt/tool')).stdout, 'imported\ntool v7\n');
  await w('exec', id, '--', 'echo built > /made');
  assert.match((await w('commit', id, 'cli/app:2')).stdout, /^cli\/app:2 {2}3 layers/);
  const child = (await w('create', 'cli/app:2')).stdout.trim();
  assert.equal((await w('exec', child, '--', 'cat /made /opt/tool')).stdout, 'built\ntool v7\n');
  assert.match((await w('images')).stdout, /^cli\/app:2 +\d+ {2}used by +1 /m);
  // A live sandbox made from an image holds its delete back, unless --force (it runs on).
  await assert.rejects(w('images', 'rm', 'cli/app:1'), /conflict/);
  await w('images', 'rm', '--force', 'cli/app:1');
  assert.equal((await w('exec', id, '--', 'cat /motd')).stdout, 'imported\n');
  await w('rm', id, child);
  await w('images', 'rm', 'cli/app:2');
  assert.doesNotMatch((await w('images')).stdout, /cli\/app:2/);
  await assert.rejects(w('images', 'rm', 'cli/app:2'), /not_found/);
});
