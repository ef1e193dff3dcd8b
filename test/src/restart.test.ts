import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { Warren } from '@warren/sdk';
import { forceCleanup, startTestWarren, type TestWarren } from './harness.js';

const opened: TestWarren[] = [];
after(async () => {
  for (const t of opened) await t.close({ removeData: false }).catch(() => undefined);
  for (const t of opened) await forceCleanup(t.dataDir);
});

test('a restart keeps running sandboxes and their sessions; dead ones become failed, not forgotten', async () => {
  const first = await startTestWarren();
  opened.push(first);
  const keep = await first.client.sandboxes.create({ image: 'busybox:latest', labels: { r: '1' } });
  const doomed = await first.client.sandboxes.create({ image: 'busybox:latest', labels: { r: '1' } });
  const sh = await keep.shell();
  await sh.exec('cd /etc; STATE=kept');
  await keep.files.write('/root/note', 'before restart');
  await keep.pause();
  await first.close({ keep: true });

  // While Warren is down, one sandbox's processes die.
  const state = JSON.parse(await readFile(`/run/runc/${doomed.id}/state.json`, 'utf8')) as { init_process_pid: number };
  process.kill(state.init_process_pid, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 200));

  const second = await startTestWarren({ dataDir: first.dataDir });
  opened.push(second);
  const c = new Warren({ url: second.url, apiKey: second.key });
  const k = await c.sandboxes.get(keep.id);
  assert.equal(k.info.state, 'running');
  assert.equal(await k.files.readText('/root/note'), 'before restart');
  assert.equal((await k.exec('echo $STATE; pwd', { session: sh.id })).stdout, 'kept\n/etc\n');
  const d = await c.sandboxes.get(doomed.id);
  assert.equal(d.info.state, 'failed');
  assert.ok(d.info.error?.message);
  assert.doesNotMatch(execFileSync('runc', ['list', '-q']).toString(), new RegExp(doomed.id));

  await second.close();
  assert.doesNotMatch(execFileSync('runc', ['list', '-q']).toString(), new RegExp(keep.id));
  const mounts = await readFile('/proc/self/mounts', 'utf8');
  assert.doesNotMatch(mounts, new RegExp(second.dataDir));
});
