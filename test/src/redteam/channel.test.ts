import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestWarren, type TestWarren } from '../harness.js';

describe("red team: the platform's channel into a sandbox cannot be hijacked", () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'], network: false });
  });
  after(async () => {
    await t?.close();
  });

  test("overwriting or deleting the image's shells changes nothing for the next command or session", async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      const early = await sb.shell();
      const evil = '#!/.warren/busybox sh\n/.warren/busybox touch /tmp/pwned\necho pwned\n';
      for (const p of ['/bin/bash', '/bin/sh', '/usr/bin/bash', '/usr/bin/dash']) await sb.files.write(p, evil, { mode: 0o755 }).catch(() => undefined);
      assert.equal((await sb.exec(['/bin/bash', '-c', 'true'])).stdout, 'pwned\n', 'the overwrite took');
      await sb.exec(['rm', '/tmp/pwned']);
      assert.equal((await sb.exec('echo $((6 * 7))')).stdout, '42\n');
      const late = await sb.shell();
      assert.equal((await late.exec('x=5; echo $((x + 1))')).stdout, '6\n');
      assert.equal((await early.exec('echo still')).stdout, 'still\n');
      assert.notEqual((await sb.exec(['test', '-e', '/tmp/pwned'])).exitCode, 0, 'nothing ran the planted shell');
      // Gone altogether: commands and sessions still run.
      await sb.exec(['rm', '-f', '/bin/bash', '/bin/sh', '/usr/bin/bash', '/usr/bin/dash']);
      assert.equal((await sb.exec('echo $BASH_VERSION | cut -c1')).stdout, '5\n');
      assert.equal((await (await sb.shell()).exec('echo fine')).stdout, 'fine\n');
    } finally {
      await sb.delete();
    }
  });

  test('the platform mount is read-only; a command sees only its stdio descriptors; the init is out of reach', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      const w = await sb.exec('echo x > /.warren/bash; rm -f /.warren/busybox; touch /.warren/new; ls /.warren | sort | tr "\\n" " "');
      assert.match(w.stderr, /Read-only file system/);
      assert.equal(w.stdout, 'bash busybox fn-zygote.py libwarren-fn.so warren-init ');
      // runc's fd-leak check, on Warren's exec path and in a session: 0, 1, 2, and the
      // descriptor ls itself opened to read the directory.
      const fds = (out: string): string[] => out.trim().split(/\s+/).sort();
      assert.deepEqual(fds((await sb.exec('ls /proc/self/fd')).stdout), ['0', '1', '2', '3']);
      const sh = await sb.shell();
      assert.deepEqual(fds((await sh.exec('ls /proc/self/fd')).stdout), ['0', '1', '2', '3']);
      // The init's socket, log and descriptors: not readable, not reachable.
      const init = await sb.exec(
        'for f in 0 1 2 3; do readlink /proc/1/fd/$f || echo no-link; cat /proc/1/fd/$f </dev/null >/dev/null 2>&1 || echo no-open; done; cat /proc/1/environ >/dev/null 2>&1 || echo no-environ; ls /proc/1/root/ >/dev/null 2>&1 || echo no-root',
      );
      assert.equal(init.stdout, 'no-link\nno-open\n'.repeat(4) + 'no-environ\nno-root\n');
      assert.equal((await sb.exec('find / -xdev -type s 2>/dev/null | wc -l')).stdout.trim(), '0');
    } finally {
      await sb.delete();
    }
  });
});
