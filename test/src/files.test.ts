import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Sandbox } from '@warren/sdk';
import { WarrenError } from '@warren/sdk';
import { errorCode, http, ownedTempDir, startTestWarren, type TestWarren } from './harness.js';

const code = (c: string) => (e: unknown) => e instanceof WarrenError && e.code === c;

describe('files', () => {
  let t: TestWarren;
  let sb: Sandbox;
  before(async () => {
    t = await startTestWarren();
    sb = await t.client.sandboxes.create({
      image: 'busybox:latest',
      workdir: '/workspace/task',
      files: [{ path: '/workspace/task/TASK.md', content: Buffer.from('# do it\n').toString('base64'), mode: 0o600 }],
    });
  });
  after(async () => {
    await sb?.delete().catch(() => undefined);
    await t?.close();
  });

  test('files and workdir from create are there before create returns', async () => {
    assert.equal(await sb.files.readText('/workspace/task/TASK.md'), '# do it\n');
    assert.equal((await sb.files.stat('/workspace/task/TASK.md')).mode & 0o777, 0o600);
    assert.equal((await sb.exec('pwd')).stdout, '/workspace/task\n');
  });

  test('write with mode and parents, read back bytes exactly, stat, list with depth', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 254, 10, 13]);
    await sb.files.write('/data/deep/dir/bin.dat', bytes);
    assert.deepEqual(Buffer.from(await sb.files.read('/data/deep/dir/bin.dat')), bytes);
    await sb.files.write('/data/run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
    assert.equal((await sb.exec('/data/run.sh')).stdout, 'ran\n');
    const st = await sb.files.stat('/data/run.sh');
    assert.equal(st.type, 'file');
    assert.equal(st.size, 19);
    assert.equal(st.mode & 0o777, 0o755);
    const one = await sb.files.list('/data');
    assert.deepEqual(one.map((e) => `${e.type}:${e.path}`).sort(), ['dir:/data/deep', 'file:/data/run.sh']);
    const deep = await sb.files.list('/data', 3);
    assert.ok(deep.some((e) => e.path === '/data/deep/dir/bin.dat' && e.size === bytes.length));
    const big = Buffer.alloc(3 * 1024 * 1024 + 17, 'z');
    await sb.files.write('/data/big', big);
    assert.equal((await sb.files.read('/data/big')).length, big.length);
  });

  test('mkdir, move, delete (recursive only when asked)', async () => {
    await sb.files.mkdir('/m/a/b');
    await sb.files.write('/m/a/b/f', 'x');
    await sb.files.move('/m/a', '/m/moved');
    assert.equal(await sb.files.readText('/m/moved/b/f'), 'x');
    assert.equal(await sb.files.exists('/m/a'), false);
    // A directory that lives in the read-only image layer moves too.
    await sb.files.move('/etc', '/etc-moved');
    assert.ok(await sb.files.exists('/etc-moved/passwd'));
    await sb.files.move('/etc-moved', '/etc');
    await assert.rejects(sb.files.remove('/m/moved'), code('conflict'));
    await sb.files.remove('/m/moved', { recursive: true });
    assert.equal(await sb.files.exists('/m/moved'), false);
    await assert.rejects(sb.files.remove('/', { recursive: true }), code('invalid_argument'));
  });

  test('tar in and out', async () => {
    const dir = await ownedTempDir('tar-');
    try {
      await mkdir(join(dir, 'src/pkg'), { recursive: true });
      await writeFile(join(dir, 'src/pkg/a.py'), 'print(1)\n');
      await writeFile(join(dir, 'src/README'), 'readme\n');
      const tar = execFileSync('tar', ['-c', '-C', join(dir, 'src'), '.']);
      await sb.files.putArchive('/workspace/repo', tar);
      assert.equal(await sb.files.readText('/workspace/repo/pkg/a.py'), 'print(1)\n');
      const out = await sb.files.getArchive('/workspace/repo');
      await writeFile(join(dir, 'out.tar'), out);
      const listing = execFileSync('tar', ['-t', '-f', join(dir, 'out.tar')]).toString();
      assert.match(listing, /pkg\/a\.py/);
      assert.match(listing, /README/);
      await assert.rejects(sb.files.putArchive('/workspace/bad', Buffer.from('not a tar at all, sorry'.repeat(40))), code('invalid_argument'));
      await assert.rejects(sb.files.getArchive('/workspace/repo/README'), code('invalid_argument'));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('nothing resolves outside the sandbox, symlinks included', async () => {
    const hostPasswd = await readFile('/etc/passwd', 'utf8');
    await sb.exec('ln -s /etc/passwd /tmp/link; ln -s ../../../../../../../../etc/shadow /tmp/rel; ln -s /proc/1/root/etc/passwd /tmp/proc');
    for (const p of ['/tmp/link', '/../../../../etc/passwd', '/tmp/proc']) {
      const inside = await sb.files.readText(p);
      assert.notEqual(inside, hostPasswd);
      assert.match(inside, /^root:x:0:0:root:\/root:\/bin\/sh/);
    }
    await assert.rejects(sb.files.readText('/tmp/rel'), code('not_found'));
    // Writing through a symlink lands inside the sandbox.
    await sb.files.write('/tmp/escape', 'x');
    await sb.exec('ln -sf /tmp /tmp/dirlink');
    await sb.files.write('/tmp/dirlink/through', 'inside');
    assert.equal(await sb.files.readText('/tmp/through'), 'inside');
    const lst = await sb.files.stat('/tmp/link');
    assert.equal(lst.type, 'symlink');
    assert.equal(lst.target, '/etc/passwd');
  });

  test('bad paths and sizes get clear errors', async () => {
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/files?path=relative/path`)), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/files`)), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/files?path=/nope`)), 'not_found');
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/files?path=/tmp`)), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/files?path=/dev/zero`)), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'PUT', `/v1/sandboxes/${sb.id}/files?path=/x&mode=999`, 'x')), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/files/list?path=/workspace/task/TASK.md`)), 'invalid_argument');
    // Announce 100 GiB: refused from the header, before any byte is stored.
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${t.url}/v1/sandboxes/${sb.id}/files?path=/huge`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${t.key}`, 'content-length': String(100 * 1024 ** 3) },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
        req.destroy();
      });
      req.on('error', reject);
      req.write('x');
    });
    assert.equal(status, 413);
    assert.equal(await sb.files.exists('/huge'), false);
    assert.equal((await sb.exec('echo still fine')).stdout, 'still fine\n');
  });
});
