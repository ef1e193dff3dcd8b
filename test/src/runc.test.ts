import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { forceCleanup, hostLeftovers, startTestWarren, type TestWarren } from './harness.js';
import { assertConfined } from './confinement.js';

const opened: TestWarren[] = [];
after(async () => {
  for (const t of opened) await t.close({ removeData: false }).catch(() => undefined);
  for (const t of opened) await forceCleanup(t.dataDir);
});

test('the runc runtime starts the same sandbox from the same config; a node restarted native takes it back', async () => {
  const first = await startTestWarren({ runtime: 'runc' });
  opened.push(first);
  const sb = await first.client.sandboxes.create({ image: 'busybox:latest' });
  assert.match(execFileSync('runc', ['list', '-q']).toString(), new RegExp(`^${sb.id}$`, 'm'));
  await assertConfined(sb);
  await sb.files.write('/root/made-by', 'runc');
  await first.close({ keep: true });

  const second = await startTestWarren({ dataDir: first.dataDir, runtime: 'native' });
  opened.push(second);
  const again = await second.client.sandboxes.get(sb.id);
  assert.equal(again.info.state, 'running');
  assert.equal(await again.files.readText('/root/made-by'), 'runc');
  const native = await second.client.sandboxes.create({ image: 'busybox:latest' });
  assert.doesNotMatch(execFileSync('runc', ['list', '-q']).toString(), new RegExp(native.id));
  assert.equal((await native.exec('echo hi')).stdout, 'hi\n');
  await second.close();
  assert.deepEqual([...hostLeftovers(sb.id), ...hostLeftovers(native.id)], []);
  assert.doesNotMatch(await readFile('/proc/self/mounts', 'utf8'), new RegExp(second.dataDir));
});

test('under runc without a sandbox network, loopback is up as with the native runtime', async () => {
  const t = await startTestWarren({ runtime: 'runc', network: false, images: ['debian-python:latest'] });
  opened.push(t);
  const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
  const r = await sb.exec([
    'python3',
    '-c',
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); c = socket.create_connection(s.getsockname()); print("ok")',
  ]);
  assert.equal(r.stdout, 'ok\n', r.stderr);
  await sb.delete();
});

test('under runc a FnCall runs on its image layers too: its listing reports the inode numbers stat does', async () => {
  const t = await startTestWarren({ runtime: 'runc', network: false, images: ['debian-python:latest'] });
  opened.push(t);
  const code = [
    'import os',
    'bad = [e.path for d in ["/", "/etc"] for e in os.scandir(d) if os.lstat(e.path).st_dev == os.lstat(d).st_dev and e.inode() != os.lstat(e.path).st_ino]',
    'print(len(bad), os.path.exists("/.warren-layers"))',
  ].join('\n');
  const r = await t.client.fn.run({ language: 'python', code });
  assert.equal(r.stdout, '0 False\n', r.stderr);
});
