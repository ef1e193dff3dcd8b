// A sandbox behaves as a plain machine of its image would: the environment Docker gives a
// container's processes, localhost and its own host name resolving, and none of the files the
// platform writes for that in a commit.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { DEFAULT_PATH } from '@warren/api';
import { http, startTestWarren, type TestWarren } from './harness.js';
import { makeTar } from './tar-writer.js';

let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'] });
});
after(async () => {
  await t?.close();
});

/** `env` output as a map. */
function envOf(out: string): Record<string, string> {
  const m: Record<string, string> = {};
  for (const line of out.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) m[line.slice(0, i)] = line.slice(i + 1);
  }
  return m;
}

describe('the environment of what Warren starts', () => {
  test('shell strings, argv commands and sessions get PATH (no . in it), HOME, USER and LOGNAME', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      for (const cmd of ['env', ['/usr/bin/env']]) {
        const e = envOf((await sb.exec(cmd)).stdout);
        assert.equal(e.PATH, DEFAULT_PATH, JSON.stringify(e));
        assert.ok(!e.PATH?.split(':').some((d) => d === '' || d === '.'), e.PATH);
        assert.equal(e.HOME, '/root');
        assert.equal(e.USER, 'root');
        assert.equal(e.LOGNAME, 'root');
      }
      // A bare name is looked up on that PATH, not on bash's built-in default (which ends in .).
      assert.equal((await sb.exec('cd /tmp && printf "#!/bin/sh\\necho planted\\n" > ls && chmod +x ls && ls /tmp/ls')).stdout, '/tmp/ls\n');
      const sh = await sb.shell();
      assert.equal((await sh.exec('echo $PATH')).stdout, `${DEFAULT_PATH}\n`);
      // As another user: its own home and names from the image's passwd.
      const nobody = envOf((await sb.exec(['env'], { user: 'nobody' })).stdout);
      assert.deepEqual([nobody.HOME, nobody.USER, nobody.LOGNAME, nobody.PATH], ['/nonexistent', 'nobody', 'nobody', DEFAULT_PATH]);
    } finally {
      await sb.delete();
    }
  });

  test('Python finds its own interpreter: sys.executable is set and a copy of it starts', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      const r = await sb.exec([
        'python3',
        '-c',
        'import sys, subprocess; print(sys.executable); print(subprocess.run([sys.executable, "-c", "print(6*7)"], capture_output=True, text=True, check=True).stdout, end="")',
      ]);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, '/usr/bin/python3\n42\n');
    } finally {
      await sb.delete();
    }
  });

  test("the image's env, then the create's, then the call's: later wins", async () => {
    const img = await t.client.images();
    const base = img.find((i) => i.name === 'busybox:latest');
    assert.deepEqual(base?.env, { PATH: DEFAULT_PATH }, 'GET /v1/images shows an image env');
    const r = await http(t, 'PUT', '/v1/images/envtest:1', { layers: base?.layers, env: { FROM_IMAGE: 'i', SHARED: 'image', PATH: '/opt/img/bin:/bin' } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual((r.json as { env: unknown }).env, { FROM_IMAGE: 'i', SHARED: 'image', PATH: '/opt/img/bin:/bin' });
    const sb = await t.client.sandboxes.create({ image: 'envtest:1', env: { SHARED: 'create', FROM_CREATE: 'c' } });
    try {
      const e = envOf((await sb.exec(['/bin/busybox', 'env'], { env: { FROM_CALL: 'x', FROM_CREATE: 'call' } })).stdout);
      assert.deepEqual([e.FROM_IMAGE, e.SHARED, e.FROM_CREATE, e.FROM_CALL, e.PATH], ['i', 'create', 'call', 'x', '/opt/img/bin:/bin']);
      const sh = await sb.shell({ env: { IN_SESSION: 's' } });
      assert.equal((await sh.exec('echo $FROM_IMAGE $SHARED $IN_SESSION $PATH')).stdout, 'i create s /opt/img/bin:/bin\n');
      // A commit keeps the image's env (never the create's: a caller's secrets stay theirs).
      const committed = await sb.commit('envtest:2');
      assert.deepEqual(committed.env, { FROM_IMAGE: 'i', SHARED: 'image', PATH: '/opt/img/bin:/bin' });
    } finally {
      await sb.delete();
    }
  });

  test('a FnCall gets the image env under its own', async () => {
    const base = (await t.client.images()).find((i) => i.name === 'debian-python:latest');
    const r = await http(t, 'PUT', '/v1/images/fnenv:1', { layers: base?.layers, env: { PATH: DEFAULT_PATH, TOOL_HOME: '/opt/tool' } });
    assert.equal(r.status, 200, r.text);
    const out = await t.client.fn.run({
      language: 'python',
      image: 'fnenv:1',
      code: 'import os, sys; print(os.environ["TOOL_HOME"], os.environ["PATH"], sys.executable)',
    });
    assert.equal(out.stdout, `/opt/tool ${DEFAULT_PATH} /usr/bin/python3\n`, out.stderr);
  });
});

describe('files as on a plain file system', () => {
  const inodes = [
    'import os',
    'bad = []',
    'for d in ["/", "/etc", "/usr/bin", "/tmp", "/work"]:',
    '    dev = os.lstat(d).st_dev',
    '    for e in os.scandir(d):',
    '        st = os.lstat(e.path)',
    // A mount point's entry is the directory it covers, on any Linux machine.
    '        if st.st_dev == dev and e.inode() != st.st_ino: bad.append(e.path)',
    'print(len(bad), bad[:5])',
  ].join('\n');

  test('a directory listing reports the inode numbers stat does, in merged directories too', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      // Written files make / and /etc merged directories (image and writable layer both).
      await sb.exec('mkdir -p /work && echo x > /work/new && echo y > /etc/new-conf && mkdir /new-dir');
      const r = await sb.exec(['python3', '-c', inodes]);
      assert.equal(r.stdout, '0 []\n', r.stderr);
    } finally {
      await sb.delete();
    }
  });

  test('a FnCall lists the inode numbers stat does, and has the host files the platform wrote', async () => {
    const out = await t.client.fn.run({
      language: 'python',
      code: `import os\nos.makedirs("/work", exist_ok=True)\nopen("/work/new", "w").write("x")\nopen("/etc/new-conf", "w").write("y")\nos.mkdir("/new-dir")\n${inodes}`,
    });
    assert.equal(out.stdout, '0 []\n', out.stderr);
    // Its host name and localhost resolve; the worker's layer mounts are not in its root; what
    // one call writes to /etc/hosts is not there for the next.
    const names = [
      'import os, socket',
      'print(open("/etc/hostname").read().strip() == socket.gethostname(), socket.gethostbyname("localhost"), os.path.exists("/.warren-layers"))',
      'print("planted" in open("/etc/hosts").read())',
      'open("/etc/hosts", "a").write("10.9.9.9 planted\\n")',
    ].join('\n');
    const first = await t.client.fn.run({ language: 'python', code: names });
    assert.equal(first.stdout, 'True 127.0.0.1 False\nFalse\n', first.stderr);
    const second = await t.client.fn.run({ language: 'python', code: names });
    assert.equal(second.stdout, 'True 127.0.0.1 False\nFalse\n', second.stderr);
  });
});

describe('ids', () => {
  test('a sandbox maps uids and gids 0-65535: chown within works, past it fails with EINVAL (as in any user-namespaced container)', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      const r = await sb.exec('touch /tmp/f && chown 65535:65535 /tmp/f && stat -c %u:%g /tmp/f; chown 65536 /tmp/f 2>&1; echo rc=$?');
      assert.match(r.stdout, /^65535:65535\n.*Invalid argument\nrc=1\n$/s);
    } finally {
      await sb.delete();
    }
  });
});

describe('names', () => {
  test('localhost and the sandbox host name resolve; a server on localhost is reachable', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      const want = sb.id.replace(/_/g, '-');
      const r = await sb.exec([
        'python3',
        '-c',
        [
          'import socket',
          'print(socket.gethostname())',
          'print(sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)}))',
          'print(socket.gethostbyname(socket.gethostname()))',
          's = socket.create_server(("localhost", 0)); port = s.getsockname()[1]',
          'c = socket.create_connection(("localhost", port), timeout=5); a, _ = s.accept(); c.sendall(b"hi"); print(a.recv(2).decode())',
        ].join('\n'),
      ]);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, `${want}\n['127.0.0.1', '::1']\n127.0.1.1\nhi\n`);
      assert.equal((await sb.exec('cat /etc/hostname /proc/sys/kernel/hostname')).stdout, `${want}\n${want}\n`);
      // The platform's files are the sandbox root's, and /etc keeps the image's owner and mode.
      const modes = await sb.exec('stat -c "%n %a %u %g %F" /etc /etc/hostname /etc/hosts /etc/resolv.conf');
      assert.equal(
        modes.stdout,
        ['/etc 755 0 0 directory', '/etc/hostname 644 0 0 regular file', '/etc/hosts 644 0 0 regular file', '/etc/resolv.conf 644 0 0 regular file', ''].join(
          '\n',
        ),
      );
    } finally {
      await sb.delete();
    }
  });

  test("an image's /etc of another mode and owner keeps them under the platform's files (a copy-up); its other files are there", async () => {
    const tar = makeTar([
      { path: 'etc/', type: 'dir', mode: 0o750, uid: 1000, gid: 1000 },
      { path: 'etc/app.conf', content: 'mine\n' },
    ]);
    const up = await http(t, 'POST', '/v1/layers?name=test/etcmode', tar, { 'content-type': 'application/x-tar' });
    assert.equal(up.status, 201, up.text);
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', layers: ['test/etcmode'] });
    try {
      const r = await sb.exec('stat -c "%a %u %g" /etc; cat /etc/app.conf /etc/hostname; grep -c localhost /etc/hosts; test -f /etc/passwd && echo passwd');
      assert.equal(r.stdout, `750 1000 1000\nmine\n${sb.id.replace(/_/g, '-')}\n2\npasswd\n`, r.stderr);
    } finally {
      await sb.delete();
    }
  });

  test('an image whose /etc/hosts is a symlink gets a file of its own; the link target is untouched', async () => {
    const tar = makeTar([
      { path: 'etc/', type: 'dir' },
      { path: 'etc/hosts', type: 'symlink', linkname: '/tmp/target' },
      { path: 'tmp/', type: 'dir', mode: 0o1777 },
      { path: 'tmp/target', content: 'keep\n' },
    ]);
    const up = await http(t, 'POST', '/v1/layers?name=test/hostlink', tar, { 'content-type': 'application/x-tar' });
    assert.equal(up.status, 201, up.text);
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', layers: ['test/hostlink'] });
    try {
      const r = await sb.exec('test -L /etc/hosts && echo link; cat /tmp/target; grep -c localhost /etc/hosts');
      assert.equal(r.stdout, 'keep\n2\n');
    } finally {
      await sb.delete();
    }
  });

  test('hosts and hostname are not committed', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      await sb.exec('echo "10.9.9.9 planted.example" >> /etc/hosts; echo marker > /etc/marker');
      const img = await sb.commit('hosts-residue:1');
      const top = img.layers.at(-1)?.slice(7) ?? '';
      const blob = join(t.dataDir, 'layers', 'blobs', top);
      const ls = execFileSync('dump.erofs', ['--ls', '--path=/etc', `--device=${blob}.data`, `${blob}.erofs`]).toString();
      assert.match(ls, /marker/);
      assert.doesNotMatch(ls, /\bhosts\b|\bhostname\b/);
    } finally {
      await sb.delete();
    }
  });
});
