// run-tests: alone, first output and timeouts timed to a few hundred milliseconds.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { ExecEvent, Sandbox } from '@warren/sdk';
import { Warren, WarrenError } from '@warren/sdk';
import { MAX_QUEUED_SESSION_COMMANDS } from '@warren/api';
import { errorCode, http, initOf, notOnMicrovm, startTestWarren, type TestWarren } from './harness.js';
import { rawFields, rawFrame, rawInit } from './raw-init.js';

async function collect(it: AsyncIterable<ExecEvent>): Promise<ExecEvent[]> {
  const out: ExecEvent[] = [];
  for await (const ev of it) out.push(ev);
  return out;
}

/** Reads a stream's first event, its start; answers the command's id. */
async function started(it: AsyncGenerator<ExecEvent>): Promise<string> {
  const ev = (await it.next()).value as ExecEvent | undefined;
  assert.ok(ev?.type === 'start', JSON.stringify(ev));
  return ev.commandId;
}

describe('commands', () => {
  let t: TestWarren;
  let sb: Sandbox;
  before(async () => {
    t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'] });
    sb = await t.client.sandboxes.create({ image: 'debian-python:latest', env: { FROM_SANDBOX: 'yes' }, workdir: '/workspace', user: 'agent' });
  });
  after(async () => {
    await sb?.delete().catch(() => undefined);
    await t?.close();
  });

  test(
    "the sandbox's init keeps a connection asked to be kept (Y): call after call on it, each ended by y, what the edge still sent of an ended one dropped",
    notOnMicrovm('the container init socket'),
    async () => {
      const conn = (): ReturnType<typeof rawInit> => rawInit(join(t.dataDir, 'run', `${sb.id}.sock`));
      const frame = rawFrame;
      const fields = rawFields;
      const kept = await conn();
      try {
        kept.s.write(Buffer.concat([frame('Y'), frame('H')]));
        assert.deepEqual(await kept.types(), ['k', 'y']);
        // A command that takes stdin ends before the edge sends it: the stdin and its end come after the `y`, and are dropped.
        kept.s.write(frame('E', fields(['a', '/bin/true'], ['i', '1'])));
        assert.deepEqual(await kept.types(), ['s', 'x', 'y']);
        kept.s.write(Buffer.concat([frame('i', Buffer.from('late')), frame('j'), frame('S', fields(['p', '/']))]));
        assert.deepEqual(await kept.types(), ['x', 'y']);
      } finally {
        kept.s.destroy();
      }
      // Without Y, a connection ends with its operation, as with an init of version 1.
      const plain = await conn();
      plain.s.write(frame('S', fields(['p', '/'])));
      assert.deepEqual(await plain.types(), ['x']);
      assert.ok(plain.s.closed || (await new Promise((r) => plain.s.once('close', () => r(true)))));
    },
  );

  test(
    'commands one after another keep using the connections kept to the init: none is closed and made anew (the end and the ready come in one write)',
    notOnMicrovm('the init as a host process'),
    async () => {
      const init = await initOf(sb.id);
      assert.ok(init, 'the sandbox has its init');
      /** The sockets the init holds (its listener, the kept connections), by inode. */
      const sockets = async (): Promise<string[]> => {
        const out: string[] = [];
        for (const fd of await readdir(`/proc/${init.pid}/fd`)) {
          const to = await readlink(`/proc/${init.pid}/fd/${fd}`).catch(() => '');
          if (to.startsWith('socket:')) out.push(to);
        }
        return out.sort();
      };
      const shell = await sb.shell();
      try {
        for (let i = 0; i < 5; i++) await shell.exec('true');
        const before = await sockets();
        // Its listener and at least one kept connection: a test of connections that are kept.
        assert.ok(before.length >= 2, `the init holds ${before.length} sockets`);
        // A caller's next command comes as soon as the last one answered: before, the init sent
        // the ready in a write of its own, which the edge often had not read by then (a
        // connection closed and another made for about one command in 20, more under load).
        for (let i = 0; i < 150; i++) await (i % 3 === 2 ? sb.files.readText('/etc/hostname') : shell.exec('true'));
        assert.deepEqual(await sockets(), before);
      } finally {
        await shell.close();
      }
    },
  );

  test('buffered: shell strings and argv, cwd, env, user, stdin, exit codes', async () => {
    const r = await sb.exec('echo out; echo err >&2; pwd; id -un; echo $FROM_SANDBOX $EXTRA; exit 3', { env: { EXTRA: 'x' } });
    assert.equal(r.stdout, 'out\n/workspace\nagent\nyes x\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.exitCode, 3);
    const argv = await sb.exec(['python3', '-c', 'import sys; print(sys.argv[1:])', 'a b', '$HOME'], { cwd: '/tmp', user: 'root' });
    assert.equal(argv.stdout, "['a b', '$HOME']\n");
    const stdin = await sb.exec('wc -c; cat', { stdin: 'hello' });
    assert.equal(stdin.stdout, '5\n');
    const missing = await sb.exec(['/no/such/binary']).catch((e: unknown) => e);
    assert.ok(missing instanceof WarrenError && missing.code === 'invalid_argument', String(missing));
    const badCwd = await sb.exec('true', { cwd: '/no/such/dir' }).catch((e: unknown) => e);
    assert.ok(badCwd instanceof WarrenError && badCwd.code === 'invalid_argument');
  });

  test("files written through the API belong to the sandbox's user", async () => {
    await sb.files.write('/workspace/new/dir/mine.txt', 'v1\n');
    const r = await sb.exec(
      'stat -c %U /workspace /workspace/new /workspace/new/dir/mine.txt; echo v2 >> /workspace/new/dir/mine.txt && cat /workspace/new/dir/mine.txt',
    );
    assert.equal(r.stdout, 'agent\nagent\nagent\nv1\nv2\n', r.stderr);
    // Directories that already existed keep their owner.
    assert.equal((await sb.exec('stat -c %U /tmp')).stdout, 'root\n');
  });

  test('streamed NDJSON: start, output as produced, exit', async () => {
    const started = Date.now();
    const stamps: number[] = [];
    const events: ExecEvent[] = [];
    for await (const ev of sb.execStream('echo one; sleep 0.5; echo two')) {
      events.push(ev);
      stamps.push(Date.now() - started);
    }
    assert.equal(events[0]?.type, 'start');
    const outs = events.filter((e) => e.type === 'stdout');
    assert.deepEqual(
      outs.map((e) => (e.type === 'stdout' ? e.data : '')),
      ['one\n', 'two\n'],
    );
    // 'one' arrived before the sleep ended: streaming, not buffering.
    const firstOut = events.findIndex((e) => e.type === 'stdout');
    assert.ok((stamps[firstOut] ?? 0) < 400, `first output after ${stamps[firstOut]} ms`);
    const exit = events[events.length - 1];
    assert.ok(exit?.type === 'exit' && exit.exitCode === 0 && !exit.timedOut);
  });

  test('a timeout kills the whole process tree', async () => {
    const r = await sb.exec('sleep 100 & sleep 100 & (sleep 100; echo never) ; wait', { timeoutMs: 500 });
    assert.equal(r.timedOut, true);
    assert.ok(r.durationMs < 5000);
    const ps = await sb.exec('ps -eo comm | grep -c "^sleep" || true');
    assert.equal(ps.stdout.trim(), '0');
  });

  test('output past maxOutputBytes is dropped and marked truncated; the server stays healthy', async () => {
    const r = await sb.exec('head -c 50000000 /dev/zero | tr "\\0" x; echo done >&2', { maxOutputBytes: 1000, timeoutMs: 30_000 });
    assert.equal(r.truncated, true);
    assert.equal(r.stdout.length + r.stderr.length, 1000);
    assert.equal(r.exitCode, 0);
    assert.equal((await sb.exec('echo ok')).stdout, 'ok\n');
  });

  test("keepOutput 'last': output streams on past maxOutputBytes and the last of it is kept", notOnMicrovm('output retention is the edge’s'), async () => {
    const r = await sb.exec('seq 1 100000', { maxOutputBytes: 1000, keepOutput: 'last', timeoutMs: 30_000 });
    assert.equal(r.truncated, true);
    assert.ok(r.stdout.length <= 1000 && r.stdout.length > 0, String(r.stdout.length));
    assert.ok(r.stdout.endsWith('\n99999\n100000\n'), JSON.stringify(r.stdout.slice(-40)));
    // A stream goes on past the first 1000 bytes to the end (a reader more than 1000 bytes behind
    // skips to the oldest kept, so how much it gets depends on how fast it reads).
    let streamed = '';
    let exit: ExecEvent | undefined;
    for await (const ev of sb.execStream('seq 1 100000', { maxOutputBytes: 1000, keepOutput: 'last' })) {
      if (ev.type === 'stdout') streamed += ev.data;
      if (ev.type === 'exit') exit = ev;
    }
    assert.ok(exit?.type === 'exit' && exit.truncated && exit.exitCode === 0, JSON.stringify(exit));
    assert.ok(streamed.endsWith('\n99999\n100000\n') && streamed.length > 1000, String(streamed.length));
  });

  test('a command outlives its dropped connection and can be re-read from an offset', async () => {
    const ac = new AbortController();
    let commandId = '';
    try {
      for await (const ev of sb.execStream('for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done', { signal: ac.signal })) {
        if (ev.type === 'start') commandId = ev.commandId;
        if (ev.type === 'stdout') ac.abort();
      }
    } catch {
      /* aborted on purpose */
    }
    assert.ok(commandId);
    const events = await collect(sb.attach(commandId, 6));
    const text = events.map((e) => (e.type === 'stdout' ? e.data : '')).join('');
    assert.equal(text, 'line2\nline3\nline4\nline5\n');
    const exit = events[events.length - 1];
    assert.ok(exit?.type === 'exit' && exit.exitCode === 0);
    // From offset 0 the whole output, again.
    const all = (await collect(sb.attach(commandId, 0))).map((e) => (e.type === 'stdout' ? e.data : '')).join('');
    assert.equal(all, 'line1\nline2\nline3\nline4\nline5\n');
  });

  test('kill and stdin on a running command; a repeated requestId runs once', async () => {
    const events: ExecEvent[] = [];
    const it = sb.execStream('cat; echo eof-seen', { keepStdinOpen: true, timeoutMs: 10_000 });
    const first = await it.next();
    assert.ok(!first.done && first.value.type === 'start');
    const id = first.value.commandId;
    await sb.writeStdin(id, 'piped\n');
    // eof is in the route's query schema: a value it does not know is refused, not read as "no".
    const badEof = await http(t, 'POST', `/v1/sandboxes/${sb.id}/commands/${id}/stdin?eof=yes`, Buffer.from('lost\n'));
    assert.equal(errorCode(badEof), 'invalid_argument', badEof.text);
    await sb.writeStdin(id, '', true);
    for await (const ev of it) events.push(ev);
    assert.equal(events.map((e) => (e.type === 'stdout' ? e.data : '')).join(''), 'piped\neof-seen\n');

    const long = sb.execStream('sleep 30', { timeoutMs: 60_000 });
    const s = await long.next();
    assert.ok(!s.done && s.value.type === 'start');
    await sb.kill(s.value.commandId, 'SIGKILL');
    const rest = await collect(long);
    const exit = rest[rest.length - 1];
    assert.ok(exit?.type === 'exit' && exit.signal === 'SIGKILL', JSON.stringify(exit));

    // Concurrent retries of one step start one command.
    const racing = await Promise.all([1, 2, 3].map(() => sb.exec('echo once >> /tmp/once; sleep 0.2', { requestId: 'step-race' })));
    assert.equal(new Set(racing.map((r) => r.commandId)).size, 1);
    assert.equal(await sb.files.readText('/tmp/once'), 'once\n');
    const a = await sb.exec('echo $RANDOM$RANDOM', { requestId: 'step-1' });
    const b = await sb.exec('echo $RANDOM$RANDOM', { requestId: 'step-1' });
    assert.equal(a.commandId, b.commandId);
    assert.equal(a.stdout, b.stdout);
    assert.equal(errorCode(await http(t, 'GET', `/v1/sandboxes/${sb.id}/commands/cmd_nope`)), 'not_found');
  });

  test('a command that reads no stdin can be killed while its stdin is full', { timeout: 90_000 }, async () => {
    // It reads none of its stdin; it says when its pipe is full (FIONREAD, which reads nothing; the
    // pipe holds 64 KiB less what its first, partial page left).
    const waitFull =
      'import array,fcntl,termios,time\nb=array.array("i",[0])\nwhile fcntl.ioctl(0,termios.FIONREAD,b) or b[0]<61440: time.sleep(0.01)\nprint("full",flush=True)\ntime.sleep(600)';
    const it = sb.execStream(['python3', '-c', waitFull], { keepStdinOpen: true, timeoutMs: 15_000 });
    const id = await started(it);
    // 8 MiB: the pipe fills, then what the init holds for it, then the socket, then the edge's queue.
    let wrote = 'waiting';
    const write = sb.writeStdin(id, new Uint8Array(8 * 1024 * 1024)).then(
      () => (wrote = 'taken'),
      (e: WarrenError) => (wrote = e.code),
    );
    const full = (await it.next()).value as ExecEvent | undefined;
    assert.ok(full?.type === 'stdout' && full.data === 'full\n', `${JSON.stringify(full)}; the write: ${wrote}`);
    const t0 = Date.now();
    await sb.kill(id, 'SIGKILL');
    const deadline = new Promise<'still running'>((r) => setTimeout(() => r('still running'), 20_000).unref());
    const rest = await Promise.race([collect(it), deadline]);
    assert.notEqual(rest, 'still running', 'the kill did not reach a command whose stdin is full');
    const exit = (rest as ExecEvent[]).at(-1);
    assert.ok(exit?.type === 'exit' && exit.signal === 'SIGKILL' && !exit.timedOut, JSON.stringify(exit));
    assert.ok(Date.now() - t0 < 10_000, `the kill took ${Date.now() - t0} ms`);
    // The write waiting behind it ends with the command, not at its 30 s deadline.
    assert.ok(['taken', 'conflict'].includes(await write), await write);
  });

  test('sessions keep cwd, exports, variables and functions; a timeout keeps the session', async () => {
    const sh = await sb.shell({ cwd: '/tmp' });
    try {
      assert.equal((await sh.exec('pwd')).stdout, '/tmp\n');
      await sh.exec('cd /workspace && export COUNT=41 && LOCAL=shell-var && greet() { echo "hi $1"; }');
      const r = await sh.exec('pwd; echo $((COUNT+1)) $LOCAL; greet you; bash -c "echo child sees $COUNT"');
      assert.equal(r.stdout, '/workspace\n42 shell-var\nhi you\nchild sees 41\n');
      const slow = await sh.exec('sleep 30', { timeoutMs: 300 });
      assert.equal(slow.timedOut, true);
      const spin = await sh.exec('while true; do :; done', { timeoutMs: 300 });
      assert.equal(spin.timedOut, true);
      assert.equal((await sh.exec('echo $COUNT; pwd')).stdout, '41\n/workspace\n');
      const bad = await sh.exec('if then fi');
      assert.notEqual(bad.exitCode, 0);
      assert.equal((await sh.exec('read x; echo "[$x]"')).stdout, '[]\n');
      assert.equal((await sh.exec(['printf', '%s\\n', 'argv in a session'])).stdout, 'argv in a session\n');
      assert.equal((await sh.exec('exit 7', {})).exitCode, 7);
      await assert.rejects(sh.exec('true'), (e: WarrenError) => e.code === 'not_found');
    } finally {
      await sh.close().catch(() => undefined);
    }
  });

  test('commands sent to a busy session wait their turn in arrival order; Promise.all on one Shell runs them in call order', async () => {
    const sh = await sb.shell();
    try {
      // Raw streams, each sent once the one before has its start event (its arrival): they queue
      // behind a running command, keep their order, see what the one before left, and a waiting
      // command's timeout counts from its own start (this one waits longer than its 1,200 ms,
      // which leaves a starved microVM under TCG time for its own tenth of a second).
      const first = sb.execStream('sleep 1.6; export SEQ=0', { session: sh.id });
      await started(first);
      const queued: Array<AsyncGenerator<ExecEvent>> = [];
      for (let i = 1; i <= 4; i++) {
        const it = sb.execStream(`sleep 0.1; export SEQ="$SEQ ${i}"; echo $SEQ`, { session: sh.id, timeoutMs: 1200 });
        await started(it);
        queued.push(it);
      }
      await collect(first);
      for (const [i, it] of queued.entries()) {
        const evs = await collect(it);
        const out = evs.map((e) => (e.type === 'stdout' ? e.data : '')).join('');
        const exit = evs[evs.length - 1];
        assert.equal(
          out,
          `0${[1, 2, 3, 4]
            .slice(0, i + 1)
            .map((n) => ` ${n}`)
            .join('')}\n`,
          JSON.stringify(evs),
        );
        assert.ok(exit?.type === 'exit' && exit.exitCode === 0 && !exit.timedOut && exit.durationMs < 1200, JSON.stringify(exit));
      }
      // The SDK's Shell: gathered commands run in the order they were called, all of them.
      const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => sh.exec(i === 0 ? 'cd /tmp; export N=0' : `N=$((N*10+${i})); echo $N $PWD`)));
      assert.deepEqual(
        rs.slice(1).map((r) => r.stdout),
        ['1 /tmp\n', '12 /tmp\n', '123 /tmp\n', '1234 /tmp\n', '12345 /tmp\n', '123456 /tmp\n', '1234567 /tmp\n'],
      );
    } finally {
      await sh.close().catch(() => undefined);
    }
  });

  test("a session's queue is bounded; a waiting command can be killed or retried by requestId; ending the session; a pause", async () => {
    const sh = await sb.shell();
    try {
      const running = sb.execStream('sleep 30', { session: sh.id, timeoutMs: 60_000 });
      await started(running);
      const waiting: Array<{ id: string; it: AsyncGenerator<ExecEvent> }> = [];
      for (let i = 0; i < MAX_QUEUED_SESSION_COMMANDS; i++) {
        const it = sb.execStream(`echo w${i}`, { session: sh.id, requestId: i === 0 ? 'queued-once' : undefined });
        waiting.push({ id: await started(it), it });
      }
      // A retry of a waiting command finds it (it takes no second place); one more is refused.
      const again = sb.execStream('echo w0', { session: sh.id, requestId: 'queued-once' });
      assert.equal(await started(again), waiting[0]!.id);
      const over = await sb
        .execStream('echo over', { session: sh.id })
        .next()
        .catch((e: unknown) => e);
      assert.ok(over instanceof WarrenError && over.code === 'resource_exhausted', String(over));
      // Killed while it waits: it leaves the line and ends as killed, never having run.
      await sb.kill(waiting[1]!.id, 'SIGTERM');
      const [killed, ...after] = await collect(waiting[1]!.it);
      assert.ok(killed?.type === 'exit' && after.length === 0, JSON.stringify(killed));
      assert.deepEqual(
        { ...killed, durationMs: 0 },
        { type: 'exit', exitCode: null, signal: 'SIGTERM', durationMs: 0, timedOut: false, truncated: false, killedBy: 'request', limitsHit: [] },
      );
      // Ending the session ends the waiting ones with not_found; the running one is killed with its shell.
      await sh.close();
      for (const it of [again, ...waiting.filter((_, i) => i !== 1).map((w) => w.it)]) {
        const evs = await collect(it);
        assert.deepEqual(evs, [{ type: 'error', error: { code: 'not_found', message: 'the session was ended before the command ran' } }]);
      }
      const end = (await collect(running)).at(-1);
      assert.ok(end?.type === 'exit' && end.exitCode === null, JSON.stringify(end));

      // A pause holds the line; after the resume it goes on in order.
      const sh2 = await sb.shell();
      const a = sb.execStream('sleep 0.3; echo a', { session: sh2.id });
      await started(a);
      const b = sb.execStream('echo b', { session: sh2.id });
      await started(b);
      await sb.pause();
      await sb.resume();
      const outs = async (it: AsyncGenerator<ExecEvent>): Promise<string> =>
        (await collect(it)).map((e) => (e.type === 'stdout' ? e.data : e.type === 'error' ? e.error.code : '')).join('');
      assert.deepEqual([await outs(a), await outs(b)], ['a\n', 'b\n']);
      await sh2.close();
    } finally {
      await sh.close().catch(() => undefined);
    }
  });

  test('seccomp: no process in the sandbox may ptrace or read another one', async () => {
    const py = [
      'import ctypes, os',
      'libc = ctypes.CDLL(None, use_errno=True)',
      // Both calls succeed without the filter: TRACEME, and a zero-length read of our own memory.
      'r = libc.ptrace(0, 0, 0, 0)',
      'print(r, ctypes.get_errno())',
      'r = libc.syscall(310, os.getpid(), 0, 0, 0, 0, 0)',
      'print(r, ctypes.get_errno())',
    ].join('\n');
    const r = await sb.exec(['python3', '-c', py], { user: 'root' });
    assert.equal(r.stdout, '-1 1\n-1 1\n', r.stderr);
  });

  test('sessions survive timeouts racing the end of the command, and output stays clean', async () => {
    for (const image of ['debian-python:latest', 'busybox:latest']) {
      const box = image === 'debian-python:latest' ? sb : await t.client.sandboxes.create({ image });
      let sh = await box.shell();
      // A shell still stuck 2 s after its command's SIGKILL is killed by the init, which ends the
      // session (docs/init-protocol.md): under TCG on a loaded machine a guest can be starved that
      // long (seen once in CI). There, a new session goes on; a container's never ends.
      let ended = 0;
      try {
        for (let i = 0; i < 30; i++) {
          const r = await sh.exec(`echo start; sleep 0.0${(i % 4) + 1}; echo end`, { timeoutMs: 15 + (i % 4) * 5 }).catch(async (e: unknown) => {
            if (process.env.WARREN_TEST_BACKEND !== 'microvm' || !(e instanceof WarrenError) || e.code !== 'not_found' || ++ended > 3) throw e;
            sh = await box.shell();
            return { stdout: '' };
          });
          // bash checks for SIGINT inside `echo` between a word and its newline: an interrupt
          // that lands there leaves "end" without it (and bash's own newline on stderr). On a
          // busy machine (a microVM under TCG) the timeout may even come before the first echo,
          // or inside it (busybox's "start" without its newline).
          assert.match(r.stdout, /^(start(\n(end\n?)?)?)?$/, `${image} #${i}: ${JSON.stringify(r)}`);
          const ok = await sh.exec(`echo ok${i}`);
          assert.equal(ok.stdout, `ok${i}\n`, `${image} #${i}: ${JSON.stringify(ok)}`);
          assert.equal(ok.stderr, '');
        }
      } finally {
        await sh.close().catch(() => undefined);
        if (box !== sb) await box.delete();
      }
    }
  });

  test('a timeout never cuts what a starved shell reads: the session, its markers and the next command stay whole', async () => {
    // A CPU-starved shell reads its input over many CPU periods, so the timeout's SIGINT lands
    // while it reads the command's line or the marker line, or between them: bash throws away
    // the line it was reading and ran the rest as a command of its own ("ommand: not found",
    // a quote left open, the session ended), or a late SIGINT put its newline into the next
    // command's stderr.
    const box = await t.client.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.1 } });
    const hog = new AbortController();
    try {
      const spin = box.execStream(['sh', '-c', 'while :; do :; done'], { signal: hog.signal });
      await spin.next();
      let sh = await box.shell();
      // As above: on a microVM (a tenth of a CPU under TCG) a shell still stuck 2 s after its
      // command's SIGKILL is ended by the init (the command answers, the next one finds the
      // session gone); a new session goes on.
      let ended = 0;
      const orNewSession = async <T>(call: Promise<T>): Promise<T | null> =>
        call.catch(async (e: unknown) => {
          if (process.env.WARREN_TEST_BACKEND !== 'microvm' || !(e instanceof WarrenError) || e.code !== 'not_found' || ++ended > 3) throw e;
          sh = await box.shell();
          return null;
        });
      for (let i = 0; i < 50; i++) {
        const r = await orNewSession(sh.exec(`echo start; sleep 0.0${(i % 4) + 1}; echo end`, { timeoutMs: 1 + (i % 7) * 5 }));
        if (!r) continue;
        assert.match(r.stdout, /^(start(\n(end\n?)?)?)?$/, `#${i}: ${JSON.stringify(r)}`);
        // (bash may add its own notes about the interrupted job; never a fragment run as a command)
        assert.doesNotMatch(r.stderr, /not found|syntax|unexpected|EOF/, `#${i}: ${JSON.stringify(r)}`);
        const ok = await orNewSession(sh.exec(`echo ok${i}`));
        if (ok) assert.deepEqual([ok.stdout, ok.stderr, ok.exitCode], [`ok${i}\n`, '', 0], `#${i}: ${JSON.stringify(ok)}`);
      }
      spin.return(undefined).catch(() => undefined);
    } finally {
      hog.abort();
      await box.delete();
    }
  });

  test('a busybox sandbox has sessions too (ash); its end ends the commands waiting in them', async () => {
    const bb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      const sh = await bb.shell();
      await sh.exec('cd /etc; X=7');
      assert.equal((await sh.exec('pwd; echo $X')).stdout, '/etc\n7\n');
      assert.equal((await sh.exec('sleep 10', { timeoutMs: 300 })).timedOut, true);
      assert.equal((await sh.exec('echo $X')).stdout, '7\n');
      // The sandbox ends: the commands waiting their turn in its sessions end with not_found.
      const c = bb.execStream('sleep 30', { session: sh.id, timeoutMs: 60_000 });
      await started(c);
      const d = bb.execStream('echo d', { session: sh.id });
      await started(d);
      await bb.delete();
      assert.deepEqual(await collect(d), [{ type: 'error', error: { code: 'not_found', message: 'the sandbox ended before the command ran' } }]);
      await collect(c).catch(() => undefined);
    } finally {
      await bb.delete();
    }
  });
});

describe('command output the node holds', () => {
  let t: TestWarren;
  const BUDGET = 1024 * 1024;
  before(async () => {
    t = await startTestWarren({ maxRetainedOutputBytes: BUDGET });
  });
  after(async () => {
    await t?.close();
  });

  /** Starts a command that writes twice the budget and keeps running; resolves once `want` bytes came. */
  async function hold(sb: Sandbox, want: number): Promise<{ id: string; rest: AsyncGenerator<ExecEvent> }> {
    const it = sb.execStream('head -c 2097152 /dev/zero | tr "\\0" y; sleep 600', { timeoutMs: 700_000 });
    const start = await it.next();
    assert.ok(!start.done && start.value.type === 'start');
    let got = 0;
    while (got < want) {
      const ev = await it.next();
      assert.ok(!ev.done, 'the stream ended early');
      if (ev.value.type === 'stdout') got += ev.value.data.length;
    }
    assert.equal(got, want);
    return { id: start.value.commandId, rest: it };
  }

  test('is bounded per tenant (half the node) and for the node: holders are refused, finished commands make room', async () => {
    const as = async (tenant: string): Promise<Sandbox> =>
      new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant }) }).sandboxes.create({ image: 'busybox:latest' });
    const [hog, mine, third] = [await as('hog'), await t.client.sandboxes.create({ image: 'busybox:latest' }), await as('third')];
    try {
      // One tenant's running command takes its share, half the node's budget, and no more.
      const h = await hold(hog, BUDGET / 2);
      await assert.rejects(hog.exec('echo x'), (e: WarrenError) => e.code === 'resource_exhausted' && /one tenant/.test(e.message));
      // Another tenant takes the other half; then a third finds the node's budget spent.
      const m = await hold(mine, BUDGET / 2);
      await assert.rejects(third.exec('echo x'), (e: WarrenError) => e.code === 'resource_exhausted' && e.details.maxRetainedOutputBytes === BUDGET);
      // Once a holder has ended, its output is what goes.
      await hog.kill(h.id, 'SIGKILL');
      for await (const ev of h.rest) if (ev.type === 'exit') assert.equal(ev.truncated, true);
      assert.equal((await hog.exec('echo x')).stdout, 'x\n');
      await assert.rejects(hog.attach(h.id, 0).next(), (e: WarrenError) => e.code === 'not_found');
      // A command gets what is left of its tenant's share, and is marked truncated.
      const big = await third.exec('head -c 1572864 /dev/zero | tr "\\0" z');
      assert.equal(big.stdout.length, BUDGET / 2 - 2);
      assert.equal(big.truncated, true);
      await mine.kill(m.id, 'SIGKILL');
      for await (const ev of m.rest) void ev;
    } finally {
      await Promise.all([hog.delete(), mine.delete(), third.delete()]);
    }
  });
});
