import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestWarren, type TestWarren } from '../harness.js';

/** What container-escape scanners (amicontained, deepce, CDK) look for, checked from inside. */
describe('red team: escape checks', () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest'], network: false });
  });
  after(async () => {
    await t?.close();
  });

  test('no host namespace, no writable kernel knob, no cgroup release_agent, no runtime socket, no modules, no extra devices', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      const r = await sb.exec(
        [
          'tr "\\0" " " < /proc/1/cmdline; echo',
          'echo "|/tmp/x" > /proc/sys/kernel/core_pattern 2>/dev/null && echo core_pattern-written',
          'echo 1 > /proc/sysrq-trigger 2>/dev/null && echo sysrq-written',
          'ls -A /sys/fs/cgroup | wc -l',
          'find / -xdev -name release_agent 2>/dev/null | wc -l',
          'mkdir -p /tmp/cg && mount -t cgroup -o memory cgroup /tmp/cg 2>/dev/null && echo cgroup-mounted',
          'ls /var/run/docker.sock /run/containerd/containerd.sock /run/podman/podman.sock 2>/dev/null | wc -l',
          'ls /lib/modules 2>/dev/null | wc -l',
          'ls /dev | sort | tr "\\n" " "; echo',
          'cat /proc/self/uid_map',
          'grep -c . /proc/kallsyms 2>/dev/null | head -1; head -1 /proc/kallsyms | cut -c1-16',
        ].join('\n'),
      );
      const lines = r.stdout.split('\n');
      assert.equal(lines[0], '/.warren/warren-init ', 'PID 1 is the sandbox init: its own pid namespace');
      assert.doesNotMatch(r.stdout, /written|mounted/);
      assert.equal(lines[1], '0', '/sys/fs/cgroup is empty');
      assert.equal(lines[2], '0', 'no release_agent anywhere');
      assert.equal(lines[3], '0', 'no container runtime socket');
      assert.equal(lines[4], '0', 'no kernel modules');
      assert.equal(lines[5], 'fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero ');
      // Root inside is an unprivileged uid outside.
      const [inside, outside] = (lines[6] ?? '').trim().split(/\s+/).map(Number);
      assert.equal(inside, 0);
      assert.ok((outside ?? 0) >= 100000, lines[6]);
      // Kernel addresses are hidden (kptr_restrict for a non-init user namespace).
      assert.match(lines[8] ?? '', /^0{16}$/);
    } finally {
      await sb.delete();
    }
  });

  test('root in each sandbox is a host uid range of its own; image files and committed files keep their owners', async () => {
    const a = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    const b = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    let c: typeof a | null = null;
    try {
      const range = async (sb: typeof a): Promise<number> => {
        const [inside, outside, size] = (await sb.exec('cat /proc/self/uid_map')).stdout.trim().split(/\s+/).map(Number);
        assert.equal(inside, 0);
        assert.equal(size, 65536);
        assert.ok(outside! >= 2 ** 30 && outside! < 2 ** 31, `host range ${outside}`);
        return outside!;
      };
      const [ra, rb] = [await range(a), await range(b)];
      assert.notEqual(ra, rb, 'two sandboxes share no host uid');
      // The image's files keep their owners (its layers are mounted idmapped into each range).
      const owners = 'stat -c "%u:%g %n" /bin/bash /etc/shadow /var/mail /tmp';
      const want = '0:0 /bin/bash\n0:42 /etc/shadow\n0:8 /var/mail\n0:0 /tmp\n';
      assert.equal((await a.exec(owners)).stdout, want);
      assert.equal((await b.exec(owners)).stdout, want);
      const made = await a.exec('mkdir /srv/x && echo hi > /srv/x/f && chown -R 1234:5678 /srv/x && sleep 30 & sleep 0.2; pgrep -x sleep | head -1');
      assert.equal(made.exitCode, 0, made.stderr);
      // On the host, a's file and a's process belong to a's range.
      const { stat, readFile } = await import('node:fs/promises');
      const st = await stat(`${t.dataDir}/sandboxes/${a.id}/upper/srv/x/f`);
      assert.deepEqual([st.uid, st.gid], [ra + 1234, ra + 5678]);
      const { readdir } = await import('node:fs/promises');
      const sleepers: number[] = [];
      for (const pid of (await readdir('/proc')).filter((n) => /^\d+$/.test(n))) {
        const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
        if (/^Name:\s+sleep$/m.test(status) && (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')) === 'sleep\x0030\x00')
          sleepers.push(Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]));
      }
      assert.deepEqual(sleepers, [ra], "a's process runs as a's root on the host");
      // A commit stores the layer in the one range layers are kept in: a new sandbox sees the
      // owners a set, in its own range.
      await a.commit('ranges/owned:v1');
      c = await t.client.sandboxes.create({ image: 'ranges/owned:v1' });
      const rc = await range(c);
      assert.ok(rc !== ra && rc !== rb);
      assert.equal((await c.exec('stat -c "%u:%g" /srv/x /srv/x/f /etc/shadow')).stdout, '1234:5678\n1234:5678\n0:42\n');
      assert.doesNotMatch(await readFile('/proc/self/mountinfo', 'utf8'), /\/mnt\/commit\//, 'the commit view is unmounted');
    } finally {
      await a.delete();
      await b.delete();
      await c?.delete();
      await t.client.deleteImage('ranges/owned:v1').catch(() => undefined);
    }
  });

  test("another sandbox's files cannot be reached by path, symlink or hard link, through commands or the files API", async () => {
    const a = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    const b = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      await a.files.write('/root/secret.txt', 'a-secret\n');
      // b hunts for a's data: nothing of the host's data dir is mounted in b.
      const hunt = await b.exec(
        'grep -rl a-secret / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | wc -l; find / -xdev -path "*sandboxes*" 2>/dev/null | wc -l',
      );
      assert.equal(hunt.stdout, '0\n0\n');
      // Symlinks and hard links made inside resolve inside.
      await b.exec('ln -s / /tmp/root-link; ln -s ../../../../../../etc/shadow /tmp/up; ln /etc/hostname /tmp/hard');
      assert.equal(Buffer.from(await b.files.read('/tmp/root-link/etc/hostname')).toString(), (await b.exec('cat /etc/hostname')).stdout);
      await assert.rejects(b.files.read('/tmp/root-link/root/secret.txt'));
      const viaLink = Buffer.from(await b.files.read('/tmp/up').catch(() => new Uint8Array()));
      assert.equal(viaLink.toString(), (await b.exec('cat /etc/shadow')).stdout, 'the link resolves in b');
      await b.files.write('/tmp/root-link/tmp/written-through-link', 'x');
      assert.equal((await b.exec('cat /tmp/written-through-link')).stdout, 'x');
      assert.equal((await a.exec('test -e /tmp/written-through-link && echo leak || echo clean')).stdout, 'clean\n');
    } finally {
      await a.delete();
      await b.delete();
    }
  });
});
