// run-tests: alone, queueing of calls timed to a second.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdir, rm, writeFile } from 'node:fs/promises';
import { constants } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Warren, type FnRunResult, type WarrenError } from '@warren/sdk';
import { CLI, errorCode, forceCleanup, hostLeftovers, http, ownedTempDir, startTestWarren, type TestWarren, until } from './harness.js';
import { rawFields, rawFrame, rawInit } from './raw-init.js';

const run = promisify(execFile);
const py = (code: string, more: Record<string, unknown> = {}): Record<string, unknown> => ({ language: 'python', code, ...more });

function ok(r: FnRunResult, stdout: string): void {
  assert.equal(r.stderr, '', r.stderr);
  assert.equal(r.exitCode, 0, JSON.stringify(r));
  assert.equal(r.stdout, stdout);
}

describe('FnCall', () => {
  let t: TestWarren;
  before(async () => {
    // One worker: consecutive calls land on the same one, which is what isolation must hold for.
    t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'], network: false, fn: { maxWorkersPerImage: 1, queueLimit: 8 } });
  });
  after(async () => {
    await t?.close();
  });

  test('python, bash and node calls answer stdout, stderr, exit code, duration; stdin, files, env and cwd reach the code', async () => {
    const r = await t.client.fn.run({
      language: 'python',
      code: 'import os, sys\nprint(sys.stdin.read().upper(), open("in/data.txt").read(), os.environ["GREETING"], os.getcwd())\nprint("warn", file=sys.stderr)\nsys.exit(3)',
      stdin: 'abc',
      files: [{ path: 'in/data.txt', content: 'ZGF0YQ==', encoding: 'base64' }],
      env: { GREETING: 'hi' },
      cwd: '/work',
    });
    assert.equal(r.stdout, 'ABC data hi /work\n');
    assert.equal(r.stderr, 'warn\n');
    assert.equal(r.exitCode, 3);
    assert.equal(r.timedOut, false);
    assert.ok(r.durationMs >= 0 && r.queuedMs >= 0);
    ok(await t.client.fn.run({ language: 'bash', code: 'read x; echo "$x" $((6*7)) $0', stdin: 'in\n' }), 'in 42 bash\n');
    // Python errors read as they do from `python3 -c`.
    const e = await t.client.fn.run({ language: 'python', code: 'def f():\n  raise ValueError("boom")\nf()' });
    assert.equal(e.exitCode, 1);
    assert.match(e.stderr, /^Traceback \(most recent call last\):\n {2}File "<string>", line 3, in <module>\n[\s\S]*ValueError: boom\n$/);
    // An interpreter the image lacks is the request's fault.
    const node = await http(t, 'POST', '/v1/fn/run', { language: 'node', code: 'console.log(1)' });
    assert.equal(node.status, 400);
    assert.equal(errorCode(node), 'invalid_argument');
    assert.match(JSON.stringify(node.json), /node/);
    const bad = await http(t, 'POST', '/v1/fn/run', { language: 'python', code: 'print(1)', image: 'nope:latest' });
    assert.equal(errorCode(bad), 'not_found');
    for (const language of ['bash', 'python']) {
      const badPath = await http(t, 'POST', '/v1/fn/run', { language, code: 'true', files: [{ path: '/proc/self/attr', content: 'x' }] });
      assert.equal(errorCode(badPath), 'invalid_argument', language);
    }
    // A Python call's files and working directory are made before its code runs (native/fn-call.c):
    // nested directories made (0755), a file or working directory where a file is refused.
    ok(
      await t.client.fn.run({
        language: 'python',
        code: 'import os\nprint(open("/srv/a/b/c.txt").read(), oct(os.stat("/srv/a/b").st_mode & 0o777), os.getcwd())',
        files: [{ path: '/srv/a/b/c.txt', content: 'deep' }],
        cwd: '/srv/here/and/there',
      }),
      'deep 0o755 /srv/here/and/there\n',
    );
    const throughFile = await http(t, 'POST', '/v1/fn/run', {
      language: 'python',
      code: 'true',
      files: [
        { path: 'f', content: 'x' },
        { path: 'f/g', content: 'y' },
      ],
    });
    const cwdFile = await http(t, 'POST', '/v1/fn/run', { language: 'python', code: 'true', files: [{ path: '/tmp/w', content: 'x' }], cwd: '/tmp/w' });
    for (const [r, message] of [
      [throughFile, 'files: /tmp/f/g: File exists'],
      [cwdFile, 'cwd: /tmp/w: File exists'],
    ] as const) {
      assert.equal(errorCode(r), 'conflict');
      assert.deepEqual((r.json as { error: { message: string; details: unknown } }).error, { code: 'conflict', message, details: { errno: 17 } });
    }
    // A file on the way to a deeper one is not a directory (ENOTDIR, as os.makedirs says it).
    const deeper = await http(t, 'POST', '/v1/fn/run', {
      language: 'python',
      code: 'true',
      files: [
        { path: '/tmp/f', content: 'x' },
        { path: '/tmp/f/g/h', content: 'y' },
      ],
    });
    assert.deepEqual((deeper.json as { error: { details: unknown } }).error.details, { errno: 20 }, JSON.stringify(deeper.json));
  });

  test('nothing of a call is there for the next: files, processes, listeners, System V IPC, /dev/shm, environment, module state', async () => {
    const first = await t.client.fn.run({
      language: 'python',
      env: { LEAK: 'yes' },
      code: [
        'import os, json, socket, subprocess',
        'open("/tmp/leak", "w").write("x"); open("/etc/leak", "w").write("x"); open("/dev/shm/leak", "w").write("x")',
        'os.environ["SET_IN_CALL"] = "1"; json.LEAKED = True',
        'subprocess.Popen(["sleep", "300"], start_new_session=True)',
        's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 7777)); s.listen()',
        'subprocess.Popen(["python3", "-c", "import socket,time\\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\'127.0.0.1\', 7778)); s.listen(); time.sleep(300)"], start_new_session=True)',
        'subprocess.run(["ipcmk", "-M", "4096"], check=True, capture_output=True)',
        'import time; time.sleep(0.3)',
        'print(len([p for p in os.listdir("/proc") if p.isdigit()]) > 1)',
      ].join('\n'),
    });
    ok(first, 'True\n');
    const second = await t.client.fn.run({
      language: 'python',
      code: [
        'import os, json, socket, subprocess',
        'print([p for p in ("/tmp/leak", "/etc/leak", "/dev/shm/leak") if os.path.exists(p)])',
        'print([p for p in os.listdir("/proc") if p.isdigit()])',
        'print("LEAK" in os.environ, "SET_IN_CALL" in os.environ, hasattr(json, "LEAKED"))',
        'refused = []',
        'for port in (7777, 7778):',
        '    try:',
        '        socket.create_connection(("127.0.0.1", port), timeout=2).close()',
        '    except ConnectionRefusedError:',
        '        refused.append(port)',
        'print(refused)',
        'print(subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout.count("0x"))',
      ].join('\n'),
    });
    ok(second, "[]\n['1']\nFalse False False\n[7777, 7778]\n0\n");
    // Nor for a bash call on the same worker.
    ok(await t.client.fn.run({ language: 'bash', code: 'ls -A /tmp /dev/shm; [ -e /etc/leak ] || echo clean' }), '/dev/shm:\n\n/tmp:\nclean\n');
  });

  test('a call finds nothing of an earlier call in its own memory (code, environment, stdin, files)', async () => {
    const token = randomBytes(16).toString('hex');
    const mark = `WRNLEAK[${token}]`;
    ok(
      await t.client.fn.run({
        language: 'python',
        code: `# ${mark}\nimport sys; sys.stdin.read(); open("f.txt").read(); print("ok")`,
        env: { SECRET: mark },
        stdin: mark,
        files: [{ path: 'f.txt', content: mark }],
      }),
      'ok\n',
    );
    const scan = await t.client.fn.run({
      language: 'python',
      timeoutMs: 30_000,
      code: [
        'import re',
        'found = set()',
        'pat = re.compile(rb"WRNLEAK\\[([0-9a-f]{32})\\]")',
        'with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:',
        '    for line in maps:',
        '        span, perms = line.split()[:2]',
        '        lo, hi = (int(x, 16) for x in span.split("-"))',
        '        if "r" not in perms or hi - lo > 1 << 28:',
        '            continue',
        '        try:',
        '            mem.seek(lo)',
        '            found.update(m.decode() for m in pat.findall(mem.read(hi - lo)))',
        '        except OSError:',
        '            pass',
        'print(sorted(found))',
      ].join('\n'),
    });
    assert.equal(scan.exitCode, 0, scan.stderr);
    assert.ok(!scan.stdout.includes(token), scan.stdout);
  });

  test('a call cannot undo its isolation: no CAP_SYS_ADMIN, /dev and /proc/sys read-only, the worker root out of reach', async () => {
    const r = await t.client.fn.run({
      language: 'bash',
      code: [
        'grep CapEff /proc/self/status',
        'umount /proc 2>/dev/null && echo umounted',
        'mount -t tmpfs x /mnt 2>/dev/null && echo mounted',
        'touch /dev/x 2>/dev/null && echo wrote-dev',
        'echo 1 > /proc/sys/kernel/ns_last_pid 2>/dev/null && echo wrote-sysctl',
        'ls /.warren | wc -l',
        'cat /proc/kcore 2>/dev/null | head -c1 | wc -c',
        // Hidden: a directory empty and read-only, a file reading as nothing.
        'ls -A /proc/acpi | wc -l',
        'touch /proc/acpi/x 2>/dev/null && echo wrote-acpi',
        'cat /proc/keys /proc/timer_list 2>/dev/null | wc -c',
      ].join('\n'),
    });
    assert.equal(r.exitCode, 0, JSON.stringify(r));
    const capEff = BigInt('0x' + (/CapEff:\s+([0-9a-f]+)/.exec(r.stdout)?.[1] ?? 'ffff'));
    assert.equal(capEff & (1n << 21n), 0n, 'CAP_SYS_ADMIN is gone');
    assert.doesNotMatch(r.stdout, /umounted|mounted|wrote-dev|wrote-sysctl|wrote-acpi/);
    assert.match(r.stdout, /\n0\n0\n0\n0\n$/);
  });

  test("a call's syscalls get the answers every sandbox process gets (its filter stacked on the worker's)", async () => {
    // unshare and mount refused (EPERM), clone3 and an unknown number ENOSYS (libc falls back),
    // ptrace EPERM, socket(AF_VSOCK) EPERM, and what programs need allowed.
    const r = await t.client.fn.run({
      language: 'python',
      code: [
        'import ctypes, os',
        'libc = ctypes.CDLL(None, use_errno=True)',
        'def err(*a):',
        '    ctypes.set_errno(0)',
        '    return "ok" if libc.syscall(*a) >= 0 else str(ctypes.get_errno())',
        'print("|".join([err(272, 0x20000), err(165, 0, 0, 0, 0, 0), err(435, 0, 0), err(1000), err(101, 0, 0, 0, 0), err(41, 40, 1, 0), err(39)]))',
      ].join('\n'),
    });
    assert.equal(r.exitCode, 0, r.stderr);
    const { EPERM, ENOSYS } = constants.errno;
    assert.deepEqual(r.stdout.trim().split('|'), [EPERM, EPERM, ENOSYS, ENOSYS, EPERM, EPERM, 'ok'].map(String));
  });

  test("a worker's init keeps a FnCall's connection asked to be kept (Y): call after call on it, each ended by y", async () => {
    ok(await t.client.fn.run(py('print(1)') as never), '1\n');
    // The worker is the sandbox whose init takes F (any other answers f: FnCall only in a worker).
    const call = rawFrame('F', rawFields(['l', 'python'], ['C', 'print(2)'], ['c', '/tmp'], ['t', '10000'], ['e', 'PATH=/usr/bin:/bin']));
    let found = 0;
    for (const name of (await readdir(join(t.dataDir, 'run'))).filter((n) => n.endsWith('.sock'))) {
      const c = await rawInit(join(t.dataDir, 'run', name));
      try {
        c.s.write(Buffer.concat([rawFrame('Y'), call]));
        const first = await c.types();
        if (!first.includes('o')) continue;
        found++;
        assert.deepEqual(first, ['o', 'x', 'y']);
        // A signal for the call that ended, then the next call, on the same connection.
        c.s.write(Buffer.concat([rawFrame('k', rawFields(['s', '9'])), call]));
        assert.deepEqual(await c.types(), ['o', 'x', 'y']);
      } finally {
        c.s.destroy();
      }
    }
    assert.equal(found, 1);
  });

  test('timeouts, crashes, memory and pid limits and the output cap cost only the call that hit them', async () => {
    const slow = await t.client.fn.run({ language: 'python', code: 'while True: pass', timeoutMs: 500 });
    assert.equal(slow.timedOut, true);
    assert.equal(slow.signal, 'SIGKILL');
    assert.ok(slow.durationMs >= 450 && slow.durationMs < 5000, String(slow.durationMs));
    // Background work of a timed-out call goes with it.
    const bg = await t.client.fn.run({ language: 'bash', code: 'sleep 100 & sleep 100', timeoutMs: 300 });
    assert.equal(bg.timedOut, true);
    const crash = await t.client.fn.run({ language: 'python', code: 'import ctypes; ctypes.string_at(0)' });
    assert.equal(crash.signal, 'SIGSEGV');
    assert.equal(crash.exitCode, null);
    // 512 MiB per worker: the kernel's OOM killer takes the call, not the worker.
    const oom = await t.client.fn.run({ language: 'python', code: 'x = bytearray(2 << 30)\nfor i in range(0, len(x), 4096): x[i] = 1', timeoutMs: 60_000 });
    assert.equal(oom.signal, 'SIGKILL', JSON.stringify(oom));
    assert.equal(oom.timedOut, false);
    const bomb = await t.client.fn.run({ language: 'bash', code: 'for i in $(seq 400); do sleep 30 & done 2>/dev/null; wait', timeoutMs: 3000 });
    assert.equal(bomb.timedOut, true);
    const loud = await t.client.fn.run({ language: 'python', code: 'import sys\nwhile True: sys.stdout.write("y" * 65536)', maxOutputBytes: 100_000 });
    assert.equal(loud.truncated, true);
    assert.equal(loud.stdout.length, 100_000);
    assert.equal(loud.timedOut, false);
    // The worker serves the next call as if nothing happened (pids of the bomb free again).
    let after: FnRunResult | null = null;
    for (let i = 0; i < 20; i++) {
      after = await t.client.fn.run(py('print(sum(range(10)))') as never);
      if (after.exitCode === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    ok(after!, '45\n');
    const n = (await t.client.nodes()).nodes[0]!;
    assert.equal(n.sandboxes, 1, 'one worker all along');
  });

  test('a batch answers in order, an error per call that could not run', async () => {
    const calls = Array.from({ length: 6 }, (_, i) => py(`import time; time.sleep(0.05); print(${i})`));
    calls.splice(3, 0, { language: 'node', code: '1' });
    const results = await t.client.fn.batch(calls as never);
    assert.equal(results.length, 7);
    results.forEach((r, i) => {
      if (i === 3) assert.equal('error' in r && r.error.code, 'invalid_argument');
      else ok(r as FnRunResult, `${i < 3 ? i : i - 1}\n`);
    });
    // Calls that end in the reverse of their start order each get their own status back.
    const ends = await t.client.fn.batch(
      Array.from({ length: 8 }, (_, i) => py(`import os, time; time.sleep(${(8 - i) * 0.03}); os._exit(${i + 1})`)) as never,
    );
    assert.deepEqual(
      ends.map((r) => ('error' in r ? r.error.code : r.exitCode)),
      Array.from({ length: 8 }, (_, i) => i + 1),
    );
    // Bulk calls run on batch workers (SCHED_IDLE; /proc/self/stat's field 41), a single call on latency ones.
    const policy = py("s = open('/proc/self/stat').read(); print(s[s.rindex(')') + 2:].split()[38])");
    const [bulk] = await t.client.fn.batch([policy] as never);
    ok(bulk as FnRunResult, '5\n');
    ok(await t.client.fn.run(policy as never), '0\n');
    const bad = await http(t, 'POST', '/v1/fn/batch', { calls: [] });
    assert.equal(errorCode(bad), 'invalid_argument');
    // The results are held until the batch ends: what they may keep together is bounded.
    const hoard = await http(t, 'POST', '/v1/fn/batch', { calls: Array.from({ length: 5 }, () => py('print(1)', { maxOutputBytes: 64 << 20 })) });
    assert.equal(hoard.status, 413, hoard.text);
    assert.equal(errorCode(hoard), 'payload_too_large');
  });

  test("calls queue fairly: another tenant's call does not wait behind a batch; a full queue answers resource_exhausted", async () => {
    const other = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'other' }) });
    const tooMany = await http(t, 'POST', '/v1/fn/batch', { calls: Array.from({ length: 9 }, () => py('print(1)')) });
    assert.equal(tooMany.status, 429);
    assert.equal(errorCode(tooMany), 'resource_exhausted');
    const slow = Array.from({ length: 8 }, (_, i) => py(`import time; time.sleep(0.25); print(${i})`));
    const t0 = Date.now();
    const big = t.client.fn.batch(slow as never).then((r) => ({ r, at: Date.now() - t0 }));
    const queued = async (): Promise<number> => Number(/^warren_fn_queued (\d+)$/m.exec((await http(t, 'GET', '/metrics')).text)?.[1]);
    await until(async () => (await queued()) === 7);
    // A single call runs on a latency worker: it waits behind none of the batch.
    const single = await t.client.fn.run(py('print("single")') as never);
    ok(single, 'single\n');
    assert.ok(single.queuedMs < 1000, String(single.queuedMs));
    // 7 of the batch wait; one more fits the limit of 8, the next does not.
    const extra = http(t, 'POST', '/v1/fn/batch', { calls: [py('print("extra")')] });
    await until(async () => (await queued()) === 8);
    // The limit is the tenant's, whatever the class: a single call is refused too.
    const full = await http(t, 'POST', '/v1/fn/run', py('print(1)'));
    assert.equal(errorCode(full), 'resource_exhausted');
    const [mineBulk] = await other.fn.batch([py('print("other")')] as never);
    const mine = mineBulk as FnRunResult;
    const mineAt = Date.now() - t0;
    ok(mine, 'other\n');
    const { r, at } = await big;
    assert.ok(r.every((x) => !('error' in x) && x.exitCode === 0));
    // One worker: the other tenant's call ran after at most one more of the batch, not after all 8.
    assert.ok(mineAt < at - 1000, `other tenant done at ${mineAt} ms, batch at ${at} ms`);
    assert.ok(mine.queuedMs < 1000, String(mine.queuedMs));
    assert.equal(((await extra).json as { results: FnRunResult[] }).results[0]!.stdout, 'extra\n');
  });

  test("the workers made for a tenant's calls count in its quota: distinct sizes cannot make more than it allows", async () => {
    const w = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'fnquota', role: 'runner', quota: { sandboxes: 2, memoryMiB: 1024 } }) });
    const call = (cpu: number) => w.fn.run({ language: 'bash', code: 'echo ok', resources: { cpu, memoryMiB: 256 } } as never);
    // Each size is a group of its own, with a worker made for this tenant: two fit.
    assert.equal((await call(0.25)).stdout, 'ok\n');
    assert.equal((await call(0.5)).stdout, 'ok\n');
    await assert.rejects(call(0.75), (e: WarrenError) => e.code === 'resource_exhausted' && /quota/.test(e.message));
    // The workers there are still serve it; and they are sandboxes of its quota.
    assert.equal((await call(0.25)).stdout, 'ok\n');
    await assert.rejects(
      w.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 } }),
      (e: WarrenError) => e.code === 'resource_exhausted',
    );
    // Another tenant is not held by it.
    assert.equal((await t.client.fn.run({ language: 'bash', code: 'echo admin', resources: { cpu: 0.75, memoryMiB: 256 } } as never)).stdout, 'admin\n');
  });

  test('warren fn run -l python FILE prints the output and exits with the code', async () => {
    const dir = await ownedTempDir('fn-cli-');
    try {
      await writeFile(join(dir, 'main.py'), 'import sys\nprint(open("/tmp/in.txt").read().strip() * 2)\nsys.exit(5)\n');
      await writeFile(join(dir, 'in.txt'), 'ab\n');
      const env = { ...process.env, WARREN_URL: t.url, WARREN_API_KEY: t.key };
      const err = await run(process.execPath, [CLI, 'fn', 'run', '-l', 'python', join(dir, 'main.py'), '--file', `/tmp/in.txt=${join(dir, 'in.txt')}`], {
        env,
      }).catch((e: { code: number; stdout: string }) => e);
      assert.equal((err as { code: number }).code, 5);
      assert.equal((err as { stdout: string }).stdout, 'abab\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("no code of an image runs with the worker's privilege: a builder's python3 that tries mount, unshare and fsopen gets none of them", async () => {
    const key = await t.client.createKey({ tenant: 'fnbuilder', role: 'builder' });
    const b = new Warren({ url: t.url, apiKey: key });
    // The builder's image: python3 is a script that probes the kernel's mount API wherever it
    // runs, appending to /tmp/probe-log (a zygote's would land in the worker's own root, which
    // every later call sees beneath its own), then prints the log.
    const probe = [
      '#!/bin/sh',
      '{',
      '  echo "run uid=$(id -u) caps=$(grep CapEff /proc/self/status)"',
      '  mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED',
      '  unshare -m true 2>/dev/null && echo UNSHARED',
      `  /usr/bin/python3.11 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); fd = l.syscall(430, b"tmpfs", 0); print("FSOPENED" if fd >= 0 else "fsopen refused")'`,
      '} >> /tmp/probe-log 2>&1',
      'cat /tmp/probe-log',
      '',
    ].join('\n');
    const sb = await b.sandboxes.create({ image: 'debian-python:latest' });
    try {
      await sb.exec('rm -f /usr/bin/python3');
      await sb.files.write('/usr/bin/python3', probe, { mode: 0o755 });
      await sb.commit('fnbuilder/evil-python:1');
    } finally {
      await sb.delete();
    }
    const r = await b.fn.run({ language: 'python', image: 'fnbuilder/evil-python:1', code: 'print(1)' });
    assert.match(r.stdout, /fsopen refused/, JSON.stringify(r));
    assert.doesNotMatch(r.stdout, /MOUNTED|UNSHARED|FSOPENED/, JSON.stringify(r));
    // Every run of it was a call's own, after the privilege was dropped: no zygote ran it first.
    const runs = [...r.stdout.matchAll(/^run uid=\d+ caps=CapEff:\s+([0-9a-f]+)$/gm)].map((m) => BigInt(`0x${m[1] ?? '0'}`));
    assert.equal(runs.length, 1, JSON.stringify(r));
    assert.ok(
      runs.every((caps) => ((caps >> 21n) & 1n) === 0n),
      `CAP_SYS_ADMIN in ${JSON.stringify(r.stdout)}`,
    );
  });

  test('a stop that keeps sandboxes still removes its workers (a restart would find them as leftovers)', async () => {
    const dataDir = t.dataDir;
    const ids = (await readdir(join(dataDir, 'sandboxes'))).filter((n) => n.startsWith('sb_'));
    assert.ok(ids.length >= 1);
    try {
      await t.close({ keep: true, removeData: false });
      for (const id of ids) assert.deepEqual(hostLeftovers(id), [], id);
    } finally {
      await forceCleanup(dataDir);
    }
  });
});
