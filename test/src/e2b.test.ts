import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { connect as netConnect } from 'node:net';
import { once } from 'node:events';
import { readFile, readdir, readlink } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import * as e2bNew from 'e2b';
import * as e2bOld from 'e2b-2.50';
import { e2bKey } from '@warren/server';
import { heldBytes, initOf, notOnMicrovm, startTestWarren, until, type TestWarren } from './harness.js';

/** E2B's SDK as a training job uses it: both pinned versions (2.51 moved create and connect under /v2). */
const SDKS = [
  { version: '2.51.0', sdk: e2bNew as unknown as typeof e2bNew },
  { version: '2.50.0', sdk: e2bOld as unknown as typeof e2bNew },
];

describe('E2B SDKs, unchanged, against Warren', () => {
  let t: TestWarren;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest', 'busybox:latest'] });
    const info = (await (await fetch(`${t.url}/v1/info`, { headers: { authorization: `Bearer ${t.key}` } })).json()) as {
      e2b: { apiUrl: string; sandboxUrl: string };
    };
    opts = { apiKey: e2bKey(t.key), apiUrl: info.e2b.apiUrl, sandboxUrl: info.e2b.sandboxUrl };
  });
  after(async () => {
    await t?.close();
  });

  for (const { version, sdk } of SDKS) {
    test(
      `${version}: create, commands (streamed, failing, background and reattached, stdin), files, list, pause and connect, kill`,
      { timeout: 180_000 },
      async () => {
        const { Sandbox, CommandExitError } = sdk;
        const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, metadata: { job: `rl-${version}` }, envs: { FROM_CREATE: 'yes' } });
        try {
          assert.match(sbx.sandboxId, /^sb_/);
          assert.equal(await sbx.isRunning(), true);
          const info = await sbx.getInfo();
          assert.equal(info.templateId, 'base');
          assert.deepEqual(info.metadata, { job: `rl-${version}` });
          assert.equal(info.state, 'running');

          // Output streamed to callbacks as it comes; the result at the end.
          const seen: string[] = [];
          const r = await sbx.commands.run('echo one; echo two >&2; echo "$FROM_CREATE $EXTRA"; pwd', {
            envs: { EXTRA: 'x' },
            cwd: '/tmp',
            onStdout: (d) => void seen.push(d),
          });
          assert.equal(r.exitCode, 0);
          assert.equal(r.stdout, 'one\nyes x\n/tmp\n');
          // As in E2B's base template: the user `user`, at home.
          assert.equal((await sbx.commands.run('id -un; pwd')).stdout, 'user\n/home/user\n');
          assert.equal((await sbx.commands.run('id -un', { user: 'root' })).stdout, 'root\n');
          assert.equal(r.stderr, 'two\n');
          assert.ok(seen.join('').includes('one\n'));

          // A non-zero exit is the SDK's own CommandExitError with its code.
          const failed = await sbx.commands.run('echo bad >&2; exit 3').catch((e: unknown) => e);
          assert.ok(failed instanceof CommandExitError, String(failed));
          assert.equal(failed.exitCode, 3);
          assert.equal(failed.stderr, 'bad\n');

          // A background command: listed by pid, reattached, fed stdin, then waited for.
          const bg = await sbx.commands.run('read line; echo "got $line"; sleep 0.2; echo done', { background: true, stdin: true });
          assert.ok(bg.pid > 0);
          assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid));
          const again = await sbx.commands.connect(bg.pid);
          await sbx.commands.sendStdin(bg.pid, 'hello\n');
          const end = await again.wait();
          assert.equal(end.stdout, 'got hello\ndone\n');
          await bg.disconnect();
          // stdin to its end: closeStdin is cat's end of input; stderr to its own callback.
          const errs: string[] = [];
          const cat = await sbx.commands.run('cat; echo gone >&2', { background: true, stdin: true, onStderr: (d) => void errs.push(d) });
          await sbx.commands.sendStdin(cat.pid, 'piped');
          await sbx.commands.closeStdin(cat.pid);
          assert.equal((await cat.wait()).stdout, 'piped');
          assert.equal(errs.join(''), 'gone\n');
          // Past its timeoutMs a command is killed, and the SDK says TimeoutError.
          await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 700 }), (e: unknown) => e instanceof sdk.TimeoutError);
          await until(async () => !(await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 30')), 10_000);
          const killed = await sbx.commands.run('sleep 100', { background: true });
          assert.equal(await sbx.commands.kill(killed.pid), true);
          await assert.rejects(killed.wait());
          assert.equal(await sbx.commands.kill(999_999), false);

          // Files: text, bytes, several, listing, info, rename, remove.
          await sbx.files.write('/tmp/a.txt', 'hello files');
          assert.equal(await sbx.files.read('/tmp/a.txt'), 'hello files');
          const bytes = new Uint8Array([0, 1, 2, 255]);
          await sbx.files.write('/tmp/b.bin', bytes.buffer);
          assert.deepEqual(new Uint8Array(await sbx.files.read('/tmp/b.bin', { format: 'bytes' })), bytes);
          // The octet-stream upload, plain and gzipped (the SDK sends those when asked).
          await sbx.files.write('/tmp/oct.txt', 'as octets', { useOctetStream: true });
          assert.equal(await sbx.files.read('/tmp/oct.txt'), 'as octets');
          await sbx.files.write('/tmp/gz.txt', 'gzipped '.repeat(100), { gzip: true });
          assert.equal(await sbx.files.read('/tmp/gz.txt'), 'gzipped '.repeat(100));
          await sbx.files.write([
            { path: '/tmp/many/x.txt', data: 'x' },
            { path: '/tmp/many/y.txt', data: 'y' },
          ]);
          assert.deepEqual((await sbx.files.list('/tmp/many')).map((e) => e.name).sort(), ['x.txt', 'y.txt']);
          assert.equal(await sbx.files.exists('/tmp/many/x.txt'), true);
          assert.equal(await sbx.files.exists('/tmp/nope'), false);
          assert.equal((await sbx.files.getInfo('/tmp/a.txt')).size, 11);
          assert.equal(await sbx.files.makeDir('/tmp/newdir'), true);
          assert.equal(await sbx.files.makeDir('/tmp/newdir'), false);
          await sbx.files.rename('/tmp/a.txt', '/tmp/c.txt');
          await sbx.files.remove('/tmp/c.txt');
          assert.equal(await sbx.files.exists('/tmp/c.txt'), false);
          await assert.rejects(sbx.files.read('/tmp/c.txt'), (e: unknown) => e instanceof sdk.NotFoundError);

          // A watched directory tells of files made, written and removed in it.
          await sbx.files.makeDir('/tmp/w');
          const events: string[] = [];
          const watch = await sbx.files.watchDir('/tmp/w', (ev) => void events.push(`${ev.type} ${ev.name}`));
          await sbx.files.write('/tmp/w/new.txt', 'a');
          await until(async () => events.includes('create new.txt'), 10_000);
          await sbx.commands.run('echo more >> /tmp/w/new.txt; sleep 0.3; rm /tmp/w/new.txt');
          await until(async () => events.includes('remove new.txt'), 10_000);
          assert.ok(events.includes('write new.txt') || events.indexOf('remove new.txt') > events.indexOf('create new.txt'), events.join(', '));
          await watch.stop();
          await assert.rejects(
            sbx.files.watchDir('/tmp/nowhere', () => undefined),
            (e: unknown) => e instanceof sdk.NotFoundError,
          );

          // Listed by metadata and state; paused, then connect resumes it with its files.
          const listed = await Sandbox.list({ ...opts, query: { metadata: { job: `rl-${version}` }, state: ['running'] } }).nextItems();
          assert.deepEqual(
            listed.map((s) => s.sandboxId),
            [sbx.sandboxId],
          );
          assert.equal(await sbx.pause(), true);
          assert.equal((await sbx.getInfo()).state, 'paused');
          const back = await Sandbox.connect(sbx.sandboxId, opts);
          assert.equal((await back.commands.run('cat /tmp/many/y.txt')).stdout, 'y');
          await sbx.setTimeout(60_000);
        } finally {
          await sbx.kill();
        }
        assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false, 'a second kill finds nothing');
        await assert.rejects(Sandbox.connect(sbx.sandboxId, opts), (e: unknown) => e instanceof sdk.NotFoundError || e instanceof sdk.SandboxError);
      },
    );
  }

  test('a terminal through the SDK, list paging, and the error classes', { timeout: 120_000 }, async () => {
    const { Sandbox, AuthenticationError, NotFoundError } = e2bNew;
    await assert.rejects(Sandbox.create('base', { ...opts, apiKey: 'e2b_00ff' }), (e: unknown) => e instanceof AuthenticationError);
    await assert.rejects(Sandbox.create('no-such-template:latest', opts), (e: unknown) => e instanceof e2bNew.SandboxError);
    const made = await Promise.all([0, 1, 2].map(() => Sandbox.create('base', { ...opts, metadata: { batch: 'paging' } })));
    try {
      const pager = Sandbox.list({ ...opts, limit: 2, query: { metadata: { batch: 'paging' } } });
      const first = await pager.nextItems();
      assert.equal(first.length, 2);
      assert.equal(pager.hasNext, true);
      const second = await pager.nextItems();
      assert.deepEqual([...first, ...second].map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort());

      const sbx = made[0]!;
      let out = '';
      const pty = await sbx.pty.create({ cols: 90, rows: 20, onData: (d) => void (out += Buffer.from(d).toString()) });
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; tty\n'));
      await until(async () => /20 90/.test(out) && /\/dev\/pts\//.test(out), 15_000);
      await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 });
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit\n'));
      await pty.wait();
      assert.match(out, /30 100/);
      const killedPty = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
      assert.equal(await sbx.pty.kill(killedPty.pid), true);
      await assert.rejects(killedPty.wait());
      await assert.rejects(sbx.commands.connect(424242), (e: unknown) => e instanceof NotFoundError);
      // An agent call without the sandbox's token, or with another's, is refused.
      const envd = `${opts.sandboxUrl}/process.Process/List`;
      const call = (id: string, token: string): Promise<Response> =>
        fetch(envd, { method: 'POST', headers: { 'content-type': 'application/json', 'e2b-sandbox-id': id, 'x-access-token': token }, body: '{}' });
      assert.equal((await call(sbx.sandboxId, 'forged')).status, 401);
      const other = await Sandbox.connect(made[1]!.sandboxId, opts);
      const token = (other as unknown as { envdAccessToken: string }).envdAccessToken;
      assert.equal((await call(made[1]!.sandboxId, token)).status, 200);
      assert.equal((await call(sbx.sandboxId, token)).status, 401, "another sandbox's token");
      // A proxy that routes by name: the sandbox in the Host (49983-{id}.{domain}) instead of the header.
      const byHost = await new Promise<number>((resolve, reject) => {
        const u = new URL(envd);
        const r = httpRequest(
          {
            host: u.hostname,
            port: u.port,
            path: u.pathname,
            method: 'POST',
            headers: { host: `49983-${made[1]!.sandboxId}.sandbox.example`, 'content-type': 'application/json', 'x-access-token': token },
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        r.on('error', reject);
        r.end('{}');
      });
      assert.equal(byHost, 200);
    } finally {
      await Promise.all(made.map((s) => s.kill()));
    }
  });

  test('a tenant over its quota gets RateLimitError, after the SDK waited as Retry-After says', { timeout: 120_000 }, async () => {
    const { Sandbox, RateLimitError } = e2bNew;
    const made = await fetch(`${t.url}/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tenant: 'e2b-quota', role: 'user', quota: { sandboxes: 1 } }),
    });
    const { key } = (await made.json()) as { key: string };
    const small = { ...opts, apiKey: e2bKey(key) };
    const one = await Sandbox.create('base', small);
    try {
      const t0 = Date.now();
      await assert.rejects(Sandbox.create('base', small), (e: unknown) => e instanceof RateLimitError);
      assert.ok(Date.now() - t0 >= 900, 'the SDK retried after Retry-After');
    } finally {
      await one.kill();
    }
  });

  /** A sandbox's agent token, as the SDK holds it. */
  const tokenOf = (sbx: e2bNew.Sandbox): string => (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
  /** A call to a sandbox's agent, as the SDK makes it. */
  const envd = (sbx: e2bNew.Sandbox, path: string, init: RequestInit & { headers?: Record<string, string> } = {}, token = tokenOf(sbx)): Promise<Response> =>
    fetch(`${opts.sandboxUrl}${path}`, {
      method: 'POST',
      ...init,
      headers: { 'content-type': 'application/json', 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token, ...init.headers },
    });
  /** A Connect server stream's messages (its end's error, if any, last). */
  const streamed = async (r: Response): Promise<Array<Record<string, unknown>>> => {
    const b = Buffer.from(await r.arrayBuffer());
    const out: Array<Record<string, unknown>> = [];
    for (let at = 0; at + 5 <= b.length; at += 5 + b.readUInt32BE(at + 1))
      out.push(JSON.parse(b.subarray(at + 5, at + 5 + b.readUInt32BE(at + 1)).toString()) as Record<string, unknown>);
    return out;
  };
  const envelope = (msg: unknown): Buffer => {
    const body = Buffer.from(JSON.stringify(msg));
    const head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 1);
    return Buffer.concat([head, body]);
  };
  const MiB = 2 ** 20;

  /**
   * Where the sandbox's agent (its PID 1) is in each file it has open at `path`: from the host
   * for a container (its agent is out of its own users' reach), from inside for a microVM.
   */
  const agentReads = async (sbx: e2bNew.Sandbox, path: string): Promise<number[]> => {
    if (process.env.WARREN_TEST_BACKEND === 'microvm') {
      const at = await sbx.commands.run(
        `for f in /proc/1/fd/*; do [ "$(readlink $f)" = ${path} ] && sed -n "s/^pos:\\s*//p" /proc/1/fdinfo/\${f##*/}; done; true`,
        {
          user: 'root',
        },
      );
      return at.stdout.split('\n').filter(Boolean).map(Number);
    }
    const init = await initOf(sbx.sandboxId);
    assert.ok(init, 'the sandbox has its agent');
    const out: number[] = [];
    for (const fd of await readdir(`/proc/${init.pid}/fd`)) {
      if ((await readlink(`/proc/${init.pid}/fd/${fd}`).catch(() => '')) !== path) continue;
      const info = await readFile(`/proc/${init.pid}/fdinfo/${fd}`, 'utf8');
      out.push(Number(/^pos:\s*(\d+)/m.exec(info)?.[1]));
    }
    return out;
  };

  /** A sandbox of template base for the duration of `run`. */
  const withSandbox = async (run: (sbx: e2bNew.Sandbox) => Promise<void>, o: Partial<typeof opts> = {}): Promise<void> => {
    const sbx = await e2bNew.Sandbox.create('base', { ...opts, ...o });
    try {
      await run(sbx);
    } finally {
      await e2bNew.Sandbox.kill(sbx.sandboxId, opts);
    }
  };

  test(
    'GET /files goes at the reader’s pace: for a client that never reads, the sandbox’s file is read no further than the buffers on the way (W3-03)',
    { timeout: 120_000 },
    () =>
      withSandbox(async (sbx) => {
        // A sparse 32 MiB file, asked for by a client that never reads.
        await sbx.commands.run('truncate -s 32M /tmp/big');
        const u = new URL(`${opts.sandboxUrl}/files?path=/tmp/big`);
        const stuck = netConnect(Number(u.port), u.hostname);
        stuck.write(`GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ${sbx.sandboxId}\r\nX-Access-Token: ${tokenOf(sbx)}\r\n\r\n`);
        await once(stuck, 'readable'); // its answer has begun; it is never read
        try {
          // Meanwhile a client that reads gets the whole file: the sandbox could have sent both.
          const r = await envd(sbx, '/files?path=/tmp/big', { method: 'GET' });
          let n = 0;
          for await (const c of r.body as unknown as AsyncIterable<Uint8Array>) n += c.length;
          assert.equal(n, 32 * MiB);
          // The agent (the sandbox's PID 1) still has the stuck one's file open, not far in.
          const pos = await agentReads(sbx, '/tmp/big');
          assert.equal(pos.length, 1, `the agent's reads of /tmp/big: ${pos.join(', ')}`);
          assert.ok(pos[0]! < 24 * MiB, `${Math.round(pos[0]! / MiB)} MiB read for a client that never reads`);
        } finally {
          stuck.destroy();
        }
      }),
  );

  test('a command streamed to a client that reads it is not held by the server while the stream stays open', { timeout: 120_000 }, () =>
    withSandbox(async (sbx) => {
      // 8 MiB of output read as it comes, then the command waits: what the stream sent must be
      // gone from the server, not kept until the connection closes (one promise the stream's
      // length, raced against each event, held every event raced).
      const before = await heldBytes();
      const r = await envd(sbx, '/process.Process/Start', {
        headers: { 'content-type': 'application/connect+json' },
        body: envelope({ process: { cmd: '/bin/sh', args: ['-c', "head -c 8388608 /dev/zero | tr '\\0' x; sleep 600"] } }),
      });
      const reader = (r.body as ReadableStream<Uint8Array>).getReader();
      // The output in base64 (4 bytes for 3) with its envelopes: all of it read once past this.
      const all = Math.ceil((8 * MiB) / 3) * 4;
      let got = 0;
      while (got < all) {
        const { value, done } = await reader.read();
        if (done) break;
        got += value.length;
      }
      const grown = (await heldBytes()) - before;
      await reader.cancel();
      assert.ok(got >= all, `the stream sent ${got} bytes`);
      // The command's own 8 MiB is kept for a replay (its retained output); the events sent are
      // not kept besides (they were: 8 MiB more, as base64 text).
      assert.ok(grown < 8 * MiB + 6 * MiB, `the server held ${(grown / MiB).toFixed(1)} MiB for a stream whose command retains 8 MiB`);
    }),
  );

  test(
    'uploads stream into the sandbox as they come (a gzip bomb is never held whole), keepalives stay within bounds, watches are bounded (W3-12)',
    { timeout: 120_000 },
    () =>
      withSandbox(async (sbx) => {
        // A gzip bomb (8 MiB of zeros in 8 KB), sent half at a time: what the first half inflates
        // to is in the sandbox before the second is sent (streamed, not held until the body's end).
        const bomb = gzipSync(Buffer.alloc(8 * MiB));
        const u = new URL(`${opts.sandboxUrl}/files?path=/tmp/bomb`);
        const up = netConnect(Number(u.port), u.hostname);
        const answer = new Promise<string>((resolve) => {
          let text = '';
          up.on('data', (b: Buffer) => void (text += b.toString())).on('end', () => resolve(text));
        });
        up.write(
          `POST ${u.pathname}${u.search} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nE2b-Sandbox-Id: ${sbx.sandboxId}\r\nX-Access-Token: ${tokenOf(sbx)}\r\n` +
            `Content-Type: application/octet-stream\r\nContent-Encoding: gzip\r\nContent-Length: ${bomb.length}\r\n\r\n`,
        );
        up.write(bomb.subarray(0, bomb.length >> 1));
        await until(async () => ((await sbx.files.getInfo('/tmp/bomb').catch(() => null))?.size ?? 0) > 0, 20_000);
        up.write(bomb.subarray(bomb.length >> 1));
        assert.match(await answer, /^HTTP\/1\.1 200/);
        assert.equal((await sbx.files.getInfo('/tmp/bomb')).size, 8 * MiB);
        const gz = { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' };
        const corrupt = await envd(sbx, '/files?path=/tmp/corrupt', { body: Buffer.concat([bomb.subarray(0, 1000), Buffer.alloc(64, 7)]), headers: gz });
        assert.equal(corrupt.status, 400);

        // keepalive-ping-interval 1e10 s is taken as the longest interval, not as a 1 ms timer.
        const pinged = await envd(sbx, '/process.Process/Start', {
          headers: { 'content-type': 'application/connect+json', 'keepalive-ping-interval': '10000000000' },
          body: envelope({ process: { cmd: '/bin/sh', args: ['-c', 'sleep 0.5'] } }),
        });
        const msgs = await streamed(pinged);
        assert.ok(
          msgs.some((m) => (m.event as { end?: unknown } | undefined)?.end),
          JSON.stringify(msgs.slice(-2)),
        );
        assert.equal(msgs.filter((m) => (m.event as { keepalive?: unknown } | undefined)?.keepalive).length, 0);

        // Watches: at most 16 of one sandbox at once; a tree of more than 4096 entries is refused.
        await sbx.files.makeDir('/tmp/w');
        const watches = await Promise.all(Array.from({ length: 16 }, () => sbx.files.watchDir('/tmp/w', () => undefined)));
        await assert.rejects(
          sbx.files.watchDir('/tmp/w', () => undefined),
          /16 watches/,
        );
        await watches[0]!.stop();
        // The server frees the place when it sees the stream go.
        await until(async () => {
          const w = await sbx.files.watchDir('/tmp/w', () => undefined).catch(() => null);
          if (w) watches[0] = w;
          return w !== null;
        }, 10_000);
        await Promise.all(watches.map((w) => w.stop()));
        // (on tmpfs: making files on a microVM's disk is slow)
        await sbx.commands.run('mkdir -p /dev/shm/many && cd /dev/shm/many && seq 4097 | xargs touch');
        await assert.rejects(
          sbx.files.watchDir('/dev/shm/many', () => undefined),
          /more than 4096 entries/,
        );
      }),
  );

  test('an access token acts as the key that asked for it: revoked, its tokens stop with it (W3-11)', { timeout: 60_000 }, async () => {
    const made = await fetch(`${t.url}/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tenant: 'e2b-revoked', role: 'user' }),
    });
    const { key, keyId } = (await made.json()) as { key: string; keyId: string };
    await withSandbox(
      async (mine) => {
        assert.equal((await envd(mine, '/process.Process/List', { body: '{}' })).status, 200);
        assert.equal((await fetch(`${t.url}/v1/keys/${keyId}`, { method: 'DELETE', headers: { authorization: `Bearer ${t.key}` } })).status, 204);
        const refused = await envd(mine, '/process.Process/List', { body: '{}' });
        assert.equal(refused.status, 401);
        assert.match(((await refused.json()) as { message: string }).message, /no longer valid/);
        await assert.rejects(mine.commands.run('true'), (e: unknown) => e instanceof e2bNew.AuthenticationError);
      },
      { apiKey: e2bKey(key) },
    );
  });

  test('E2B calls go through the API’s schemas and leave audit entries', { timeout: 120_000 }, async () => {
    const { Sandbox } = e2bNew;
    await assert.rejects(Sandbox.create('base', { ...opts, metadata: { 'bad key!': 'x' } }), /metadata\.bad key!: label keys/);
    await assert.rejects(Sandbox.create('base', { ...opts, envs: { 'A=B': 'x' } }), /envVars\.A=B: environment names/);
    const sbx = await Sandbox.create('base', { ...opts, metadata: { audited: 'yes' } });
    try {
      await assert.rejects(sbx.commands.run('true', { envs: { 'NUL\0': 'x' } }), /process\.envs/);
      await assert.rejects(sbx.commands.run('true', { user: 'not a user' }), /user: a user name/);
      const size = await envd(sbx, '/process.Process/Start', {
        headers: { 'content-type': 'application/connect+json' },
        body: envelope({ process: { cmd: '/bin/sh' }, pty: { size: { cols: 0, rows: 24 } } }),
      });
      const ended = (await streamed(size)).at(-1) as { error?: { code: string; message: string } };
      assert.equal(ended.error?.code, 'invalid_argument');
      assert.match(ended.error?.message ?? '', /pty\.size/);
      const tagged = await envd(sbx, '/process.Process/Start', {
        headers: { 'content-type': 'application/connect+json' },
        body: envelope({ process: { cmd: '/bin/true' }, tag: 'x'.repeat(300) }),
      });
      assert.match(((await streamed(tagged)).at(-1) as { error?: { message: string } }).error?.message ?? '', /^process: tag:/);
      await sbx.commands.run('true');
      await sbx.files.write('/tmp/audited.txt', 'x');
      await sbx.setTimeout(60_000);
      const entries = async (): Promise<Array<{ method: string; path: string; keyId: string | null; status: number }>> =>
        (
          (await (await fetch(`${t.url}/v1/audit?sandbox=${sbx.sandboxId}`, { headers: { authorization: `Bearer ${t.key}` } })).json()) as {
            entries: Array<{ method: string; path: string; keyId: string | null; status: number }>;
          }
        ).entries;
      const seen = (await entries()).map((e) => `${e.method} ${e.path} ${e.keyId} ${e.status}`);
      for (const want of [
        /^POST \/e2b\/(v2\/)?sandboxes admin 201$/,
        /^POST \/e2b\/envd\/process\.Process\/Start admin 200$/,
        /^POST \/e2b\/envd\/files admin 200$/,
        /^POST \/e2b\/sandboxes\/sb_\w+\/timeout admin 204$/,
      ])
        assert.ok(
          seen.some((e) => want.test(e)),
          `${String(want)} in ${seen.join('; ')}`,
        );
    } finally {
      await sbx.kill();
    }
  });

  /** Waits for an event the watcher callback was given. */
  const seenEvent = (events: e2bNew.FilesystemEvent[], type: e2bNew.FilesystemEventType, name: string): Promise<e2bNew.FilesystemEvent> =>
    until(async () => events.some((e) => e.type === type && e.name === name), 15_000).then(() => events.find((e) => e.type === type && e.name === name)!);

  test(
    'files as E2B’s own tests use them: paths from the user’s home, owners, metadata kept as xattrs, symlink targets, removing what is not there',
    { timeout: 120_000 },
    () =>
      withSandbox(async (sbx) => {
        const { InvalidArgumentError, FileType } = e2bNew;
        const written = await sbx.files.write('rel.txt', 'x', { metadata: { author: 'me', purpose: 'test' } });
        assert.equal(written.path, '/home/user/rel.txt');
        assert.deepEqual(written.metadata, { author: 'me', purpose: 'test' });
        const info = await sbx.files.getInfo('rel.txt');
        assert.deepEqual(
          [info.path, info.owner, info.group, info.type, info.metadata],
          ['/home/user/rel.txt', 'user', 'user', FileType.FILE, { author: 'me', purpose: 'test' }],
        );
        assert.deepEqual((await sbx.files.list('.')).find((e) => e.name === 'rel.txt')?.metadata, { author: 'me', purpose: 'test' });
        assert.deepEqual((await sbx.files.rename('rel.txt', 'moved.txt')).metadata, { author: 'me', purpose: 'test' });
        // An upload without metadata clears it; one set in the sandbox (user.e2b.*) shows.
        assert.equal((await sbx.files.write('moved.txt', 'y', { useOctetStream: true })).metadata, undefined);
        assert.equal((await sbx.files.getInfo('moved.txt')).metadata, undefined);
        await sbx.commands.run(`python3 -c "import os; os.setxattr('/home/user/moved.txt', 'user.e2b.by', b'hand')"`);
        assert.deepEqual((await sbx.files.getInfo('moved.txt')).metadata, { by: 'hand' });
        await assert.rejects(sbx.files.write('bad.txt', 'x', { metadata: { good: 'bad\nvalue' } }), (e: unknown) => e instanceof InvalidArgumentError);
        assert.equal(await sbx.files.exists('bad.txt'), false);
        // Relative paths in every kind of write and read.
        assert.equal((await sbx.files.write('gz.txt', 'zipped', { gzip: true })).path, '/home/user/gz.txt');
        assert.deepEqual(
          (await sbx.files.writeFiles([{ path: 'many/a.txt', data: 'a' }])).map((e) => e.path),
          ['/home/user/many/a.txt'],
        );
        await sbx.files.write('empty.txt', '');
        assert.equal(await sbx.files.read('empty.txt'), '');
        await sbx.commands.run('ln -s moved.txt link');
        assert.equal((await sbx.files.getInfo('link')).symlinkTarget, '/home/user/moved.txt');
        // Removing what is not there succeeds, as envd's does.
        await sbx.files.remove('not-there');
      }),
  );

  test(
    'watches as E2B’s own tests use them: recursive after a folder appears, entries in events, the watcher calls of E2B’s Python SDK',
    { timeout: 120_000 },
    () =>
      withSandbox(async (sbx) => {
        const { FilesystemEventType, FileType } = e2bNew;
        await sbx.files.makeDir('w');
        const events: e2bNew.FilesystemEvent[] = [];
        const handle = await sbx.files.watchDir('w', (e) => void events.push(e), { recursive: true, includeEntry: true, allowNetworkMounts: true });
        await sbx.files.makeDir('w/nested');
        await seenEvent(events, FilesystemEventType.CREATE, 'nested');
        await sbx.files.write('w/nested/f.txt', 'a');
        const wrote = await seenEvent(events, FilesystemEventType.WRITE, 'nested/f.txt');
        assert.deepEqual([wrote.entry?.path, wrote.entry?.type, wrote.entry?.owner], ['/home/user/w/nested/f.txt', FileType.FILE, 'user']);
        await handle.stop();

        // CreateWatcher, GetWatcherEvents, RemoveWatcher.
        const unary = async (call: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
          const r = await envd(sbx, `/filesystem.Filesystem/${call}`, { body: JSON.stringify(body) });
          return { status: r.status, json: (await r.json()) as Record<string, unknown> };
        };
        const { watcherId } = (await unary('CreateWatcher', { path: '/home/user/w', recursive: true })).json as { watcherId: string };
        await sbx.files.write('w/polled.txt', 'b');
        await until(async () => {
          const got = (await unary('GetWatcherEvents', { watcherId })).json as { events: Array<{ name: string; type: string }> };
          return got.events.some((e) => e.name === 'polled.txt' && e.type === 'EVENT_TYPE_CREATE');
        }, 15_000);
        assert.equal((await unary('RemoveWatcher', { watcherId })).status, 200);
        assert.equal((await unary('GetWatcherEvents', { watcherId })).status, 404);
      }),
  );

  test(
    'the lifecycle as E2B’s own tests use it: lists newest first across states, connect never shortens, setTimeout does, paused is not running, a kill mid-command, metrics',
    { timeout: 180_000 },
    async () => {
      const { Sandbox, TimeoutError } = e2bNew;
      const tag = { lifecycle: `l-${Date.now()}` };
      const older = await Sandbox.create('base', { ...opts, metadata: tag });
      const newer = await Sandbox.create('base', { ...opts, metadata: tag });
      try {
        assert.equal((await newer.getInfo()).envdVersion, '0.6.4');
        await newer.betaPause();
        assert.equal(await newer.isRunning(), false, 'a paused sandbox’s agent does not answer');
        const ids = (xs: e2bNew.SandboxInfo[]): string[] => xs.map((x) => x.sandboxId);
        // Pages newest first, running and paused together, and no next page after the last.
        const pager = Sandbox.list({ ...opts, limit: 1, query: { metadata: tag, state: ['running', 'paused'] } });
        assert.deepEqual(ids(await pager.nextItems()), [newer.sandboxId]);
        assert.equal(pager.hasNext, true);
        assert.deepEqual(ids(await pager.nextItems()), [older.sandboxId]);
        assert.equal(pager.hasNext, false);
        const list = async (o: Parameters<typeof Sandbox.list>[0]): Promise<string[]> => ids(await Sandbox.list({ ...opts, ...o }).nextItems());
        assert.deepEqual(await list({ query: { metadata: tag, state: ['paused'] } }), [newer.sandboxId]);
        assert.deepEqual(await list({ query: { metadata: tag }, order: 'asc' }), [older.sandboxId, newer.sandboxId]);
        const startedAt = (await older.getInfo()).startedAt;
        assert.deepEqual(await list({ query: { metadata: tag, startedAfter: startedAt }, order: 'asc' }), [older.sandboxId, newer.sandboxId]);
        assert.deepEqual(await list({ query: { metadata: tag, startedAfter: new Date((await newer.getInfo()).startedAt.getTime() + 1000) } }), []);
        assert.deepEqual((await list({ query: { metadata: tag, template: 'base' } })).length, 2);
        assert.deepEqual(await list({ query: { metadata: tag, template: 'unknown' } }), []);
        // Connect resumes a paused one; it lengthens a timeout, never shortens one; setTimeout does.
        const back = await Sandbox.connect(newer.sandboxId, opts);
        assert.equal(await back.isRunning(), true);
        const end = (await older.getInfo()).endAt.getTime();
        await Sandbox.connect(older.sandboxId, { ...opts, timeoutMs: 10_000 });
        assert.equal((await older.getInfo()).endAt.getTime(), end);
        await older.connect({ timeoutMs: 600_000 });
        assert.ok((await older.getInfo()).endAt.getTime() > end);
        // Metrics: the reading now, in E2B's shape; none for a range before the sandbox was.
        const [m, ...more] = await back.getMetrics();
        assert.equal(more.length, 0);
        assert.ok(m && m.cpuCount >= 1 && m.memTotal > 0 && m.memUsed > 0 && m.diskTotal > 0 && m.diskUsed > 0 && m.cpuUsedPct >= 0, JSON.stringify(m));
        assert.deepEqual(await back.getMetrics({ start: new Date(Date.now() - 3_600_000), end: new Date(Date.now() - 1_800_000) }), []);
        // A sandbox killed while a command streams: the SDK's own "killed" error.
        const cmd = await older.commands.run('sleep 60', { background: true });
        await older.kill();
        const err = await cmd.wait().catch((e: unknown) => e);
        assert.ok(err instanceof TimeoutError && /killed or reached its end of life/.test(err.message), String(err));
        // setTimeout shortens: the sandbox ends at its new time, and its agent says so.
        await back.setTimeout(1000);
        await until(async () => !(await back.isRunning()), 20_000);
      } finally {
        await Promise.all([older, newer].map((s) => Sandbox.kill(s.sandboxId, opts)));
      }
    },
  );

  test(
    'a command streams on past 10 MiB of output, as envd does (its end was dropped)',
    { timeout: 120_000, ...notOnMicrovm('output retention is the edge’s') },
    () =>
      withSandbox(async (sbx) => {
        let tail = '';
        let bytes = 0;
        const r = await sbx.commands.run('head -c 12000000 /dev/zero | tr "\\0" a; echo; echo "DONE-$((6 * 7))"', {
          timeoutMs: 100_000,
          onStdout: (d) => {
            bytes += d.length;
            tail = (tail + d).slice(-100);
          },
        });
        assert.equal(r.exitCode, 0);
        assert.ok(tail.endsWith('DONE-42\n') && bytes > 12_000_000, `${bytes} bytes, ending ${JSON.stringify(tail)}`);
      }),
  );

  test('an image without /bin/bash: E2B’s commands run with the platform’s own bash', { timeout: 60_000 }, async () => {
    const sbx = await e2bNew.Sandbox.create('busybox:latest', opts);
    try {
      assert.equal((await sbx.commands.run('test -e /bin/bash || echo "no bash, yet $((6 * 7))"')).stdout, 'no bash, yet 42\n');
    } finally {
      await sbx.kill();
    }
  });
});
