// run-tests: alone, a neighbour's slowest command timed while walkers load the node.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { http, startTestWarren, type TestWarren } from '../harness.js';

/**
 * What agents were seen doing on other platforms, one by one: hunting for answers the platform
 * left behind, forging messages on its channels, and bringing the kernel down by walking /proc at
 * scale. (Overwriting the shell: channel.test.ts; extent ioctls: syscalls.test.ts; filling
 * storage: exhaustion.test.ts.)
 */
describe('red team: incidents', () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest'], network: false });
  });
  after(async () => {
    await t?.close();
  });

  test('nothing the platform carried (commands, stdin, env, output, session state) nor its keys are anywhere inside to find', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      const marks = Array.from({ length: 5 }, () => `ans${randomBytes(8).toString('hex')}`);
      const [inCmd, inStdin, inEnv, inOut, inSession] = marks as [string, string, string, string, string];
      await sb.exec(`true ${inCmd}`);
      await sb.exec(['cat'], { stdin: `${inStdin}\n` });
      await sb.exec(['true'], { env: { ANSWER: inEnv } });
      await sb.exec(['python3', '-c', `print("${inOut.slice(0, 8)}" + "${inOut.slice(8)}")`]);
      const sh = await sb.shell();
      await sh.exec(`export SECRET=${inSession}; cd /tmp; echo $SECRET > /dev/null`);
      // The hunter's script holds the marks reversed, so the file it is in does not match itself.
      // The node's admin key (the API's, in its data dir) too: nothing of the host is mounted here.
      const hunted = [...marks, t.key];
      assert.ok(t.key.length >= 8);
      const hunt = [
        'set -u',
        ...hunted.map((m) => `P=$(echo ${[...m].reverse().join('')} | rev); grep -rlF "$P" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null || true`),
      ];
      await sb.files.write('/root/hunt.sh', hunt.join('\n') + '\n');
      const r = await sb.exec(['/.warren/bash', '/root/hunt.sh'], { timeoutMs: 60_000 });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, '', `found: ${r.stdout}`);
      // The session still has its state: it is in the session's memory, not on disk.
      assert.equal((await sh.exec('echo $SECRET; pwd')).stdout, `${inSession}\n/tmp\n`);
    } finally {
      await sb.delete();
    }
  });

  test('forged protocol frames on stdout are data; no platform socket is listed or reachable inside', async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      // Bytes shaped like an init reply frame ("x": done, exit code 0) then a real exit of 3.
      const forged = await sb.exec(['python3', '-c', 'import sys; sys.stdout.write("\\x00\\x00\\x00\\x04xc0\\n"); sys.stdout.flush(); sys.exit(3)']);
      assert.equal(forged.exitCode, 3);
      assert.equal(forged.stdout, '\x00\x00\x00\x04xc0\n');
      // Every Unix socket the sandbox can see, by path or abstract name, is tried: none answers.
      const probe = [
        'import socket',
        'seen = []',
        'for line in open("/proc/net/unix").read().splitlines()[1:]:',
        '    f = line.split()',
        '    if len(f) < 8: continue',
        '    name = f[7]',
        '    seen.append(name)',
        '    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)',
        '    try:',
        '        s.connect("\\0" + name[1:] if name.startswith("@") else name)',
        '        print("connected", name)',
        '    except OSError:',
        '        pass',
        'print("listed", len(seen))',
      ].join('\n');
      const r = await sb.exec(['python3', '-c', probe]);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, 'listed 0\n', 'no named Unix socket of anyone is visible in the sandbox');
      // The init socket's host path does not exist inside, whatever the data dir is called.
      assert.notEqual((await sb.exec(['test', '-e', `${t.dataDir}/run/${sb.id}.sock`])).exitCode, 0);
    } finally {
      await sb.delete();
    }
  });

  test("a session command can neither read, predict nor forge the end marker of its own command: the exit code is the shell's", async () => {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      const sh = await sb.shell();
      // Everything of the session shell a command can reach: its descriptors (its saved stdin
      // among them), its memory and environment, and what it reads from.
      const thief = [
        'import os, glob, re',
        'me = os.getppid()',
        'seen = b""',
        'for fd in glob.glob(f"/proc/{me}/fd/*"):',
        '    try:',
        '        f = os.open(fd, os.O_RDONLY | os.O_NONBLOCK)',
        '        try: seen += os.read(f, 65536)',
        '        except OSError: pass',
        '        os.close(f)',
        '    except OSError: pass',
        'for name in ("cmdline", "environ", "mem"):',
        '    try: seen += open(f"/proc/{me}/{name}", "rb").read(1 << 20)',
        '    except OSError: pass',
        'print("stolen" if re.search(rb"__W_[OE]_[0-9a-f]{32}", seen) else "nothing")',
      ].join('\n');
      await sb.files.write('/tmp/thief.py', thief);
      const r = await sh.exec('python3 /tmp/thief.py; exit_code_is_real=7; (exit $exit_code_is_real)');
      assert.equal(r.stdout, 'nothing\n', JSON.stringify(r));
      assert.equal(r.exitCode, 7);
      // A forged marker of the same shape (the nonce is 128 random bits, never the same twice) is
      // output like any other, and the real exit code stands.
      const forged = await sh.exec(
        `printf '\\n__W_O_${'0'.repeat(32)} 0\\n'; printf '\\n__W_E_${'0'.repeat(32)}\\n' >&2; echo after; exit_code=5; (exit $exit_code)`,
      );
      assert.equal(forged.exitCode, 5, JSON.stringify(forged));
      assert.match(forged.stdout, new RegExp(`__W_O_${'0'.repeat(32)} 0\\nafter\\n$`));
      assert.match(forged.stderr, /__W_E_0{32}/);
      // The session goes on as before.
      assert.equal((await sh.exec('echo ok')).stdout, 'ok\n');
    } finally {
      await sb.delete();
    }
  });

  test('many sandboxes walking and reading all of /proc and /sys at once leave the node and a neighbour serving', async () => {
    const walkers = await Promise.all(
      [0, 1, 2].map(() => t.client.sandboxes.create({ image: 'debian-python:latest', resources: { cpu: 0.5, memoryMiB: 256 } })),
    );
    const neighbour = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    try {
      // Every file (not a link) of both trees, on their own mounts only, read 4 KiB each, a read
      // that blocks cut after a second: as `find -xdev -type f` with `timeout 1 head -c 4096`, in
      // one process (a fork or two a file made the walk minutes long on two cores).
      const walk = [
        'import os, signal',
        'def cut(*_): raise TimeoutError()',
        'signal.signal(signal.SIGALRM, cut)',
        'n = 0',
        "for top in ('/proc', '/sys'):",
        '    dev = os.stat(top).st_dev',
        '    for root, dirs, files in os.walk(top):',
        '        def same(d):',
        '            try: return os.lstat(os.path.join(root, d)).st_dev == dev',
        '            except OSError: return False',
        '        dirs[:] = [d for d in dirs if same(d)]',
        '        for f in files:',
        '            p = os.path.join(root, f)',
        "            if p.endswith(('/pagemap', '/kcore', '/kmsg')) or os.path.islink(p): continue",
        '            signal.setitimer(signal.ITIMER_REAL, 1)',
        '            try:',
        '                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)',
        '                try: os.read(fd, 4096)',
        '                finally: os.close(fd)',
        '                n += 1',
        '            except Exception: pass',
        '            finally: signal.setitimer(signal.ITIMER_REAL, 0)',
        "print('walked', n)",
      ].join('\n');
      const walking = walkers.map((w) => w.exec(['python3', '-c', walk], { timeoutMs: 120_000 }));
      // Meanwhile (while any walk runs, and a second at least) the neighbour answers, each call
      // well within a second or two.
      let walked = false;
      const all = Promise.all(walking).finally(() => (walked = true));
      const slowest = { ms: 0 };
      const until = Date.now() + 1000;
      while (!walked || Date.now() < until) {
        const s = performance.now();
        assert.equal((await neighbour.exec('echo ok')).stdout, 'ok\n');
        slowest.ms = Math.max(slowest.ms, performance.now() - s);
        assert.equal((await http(t, 'GET', '/healthz')).status, 200);
      }
      assert.ok(slowest.ms < 2000, `the neighbour's slowest exec took ${slowest.ms.toFixed(0)} ms`);
      for (const r of await all) assert.ok(r.timedOut || Number(/^walked (\d+)$/m.exec(r.stdout)?.[1]) > 1000, JSON.stringify(r).slice(0, 300));
      for (const w of walkers) assert.equal((await w.exec('echo still')).stdout, 'still\n');
    } finally {
      await Promise.all([...walkers, neighbour].map((s) => s.delete()));
    }
  });
});
