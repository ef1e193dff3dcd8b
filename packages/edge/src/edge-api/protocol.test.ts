import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import { connect, createServer, type AddressInfo } from 'node:net';
import { once } from 'node:events';
import type { Duplex } from 'node:stream';
import type { ExecEvent } from '@warren/api';
import { WarrenError } from '@warren/api';
import type { EdgeApi } from './edge-api.js';
import type { EdgeEvent } from '../lifecycle/events.js';
import { EdgeEvents } from '../lifecycle/events.js';
import { pushIterable } from '../util/push-iterable.js';
import { listenEdgeApi } from './server.js';
import { remoteEdgeApi } from './client.js';
import { EDGE_CALLS } from './wire.js';
import { selfSignedCertificate } from './tls-cert.js';
import { createServer as createTlsServer } from 'node:tls';

/** A strict fake edge: the calls a test names, every other one throws. */
function fakeEdge(calls: Partial<EdgeApi>): EdgeApi {
  return new Proxy(calls as EdgeApi, {
    get(target, name: string) {
      const f = (target as unknown as Record<string, unknown>)[name];
      if (f) return f;
      return () => {
        throw new Error(`unexpected edge call ${name}`);
      };
    },
  });
}

async function serve(
  api: EdgeApi,
  token = 'tok',
  maxSockets?: number,
  edgeNow?: () => number,
): Promise<{ remote: ReturnType<typeof remoteEdgeApi>; socketPath: string; close(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-edge-api-'));
  const socketPath = join(dir, 'edge.sock');
  const served = await listenEdgeApi(api, socketPath, { token, now: edgeNow });
  const remote = remoteEdgeApi({ socketPath, token, maxSockets });
  return {
    remote,
    socketPath,
    close: async () => {
      remote.disconnect();
      await served.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

test('every EdgeApi call has a way over the wire, and the remote client has each one', async () => {
  const t = await serve(fakeEdge({}));
  try {
    for (const name of Object.keys(EDGE_CALLS)) assert.equal(typeof (t.remote as unknown as Record<string, unknown>)[name], 'function', name);
  } finally {
    await t.close();
  }
});

test('unary calls carry plain data and bytes both ways; left-out arguments stay left out; errors keep code, message and details', async () => {
  const seen: unknown[][] = [];
  const t = await serve(
    fakeEdge({
      create: async (spec, files) => {
        seen.push([spec, files]);
        return { id: spec.id, paused: false, lastActivityMs: 5, expiresAtMs: null, usage: null, network: null };
      },
      fnCall: async (_id, spec) => ({
        stdout: Buffer.concat([spec.stdin ?? Buffer.alloc(0), Buffer.from([0, 255])]),
        stderr: Buffer.alloc(0),
        exitCode: 0,
        signal: null,
        timedOut: false,
        truncated: false,
      }),
      start: async (id, req, commandId) => {
        seen.push([id, req, commandId]);
        return commandId ?? 'cmd_default';
      },
      pause: async (id) => {
        throw new WarrenError('conflict', `sandbox ${id} is stopped`, { id, state: 'stopped' });
      },
      resume: async () => {
        throw new Error('a raw failure with /host/paths in it');
      },
    }),
  );
  try {
    const spec = {
      id: 'sb_1',
      layers: ['sha256:aa'],
      resources: { cpu: 1, memoryMiB: 64, pids: 8 },
      env: { A: 'b' },
      user: null,
      workdir: null,
      expiresAtMs: null,
      idleTimeoutMs: null,
      lastActivityMs: 5,
      paused: false,
    };
    const made = await t.remote.create(spec, [{ path: '/x', content: Buffer.from([1, 2, 3]), mode: 0o600 }]);
    assert.deepEqual(made, { id: 'sb_1', paused: false, lastActivityMs: 5, expiresAtMs: null, usage: null, network: null });
    assert.deepEqual(seen[0], [spec, [{ path: '/x', content: Buffer.from([1, 2, 3]), mode: 0o600 }]]);
    assert.ok(Buffer.isBuffer((seen[0][1] as Array<{ content: unknown }>)[0]!.content));
    const out = await t.remote.fnCall('sb_1', {
      language: 'bash',
      code: 'cat',
      stdin: Buffer.from('in'),
      env: [],
      cwd: '/',
      timeoutMs: 1000,
      files: [],
    } as never);
    assert.deepEqual(out.stdout, Buffer.from([0x69, 0x6e, 0, 255]));
    assert.equal(await t.remote.start('sb_1', { cmd: 'true' }), 'cmd_default');
    assert.equal(seen[1]!.length, 3);
    assert.equal(seen[1]![2], undefined);
    await assert.rejects(
      t.remote.pause('sb_9'),
      (e: WarrenError) => e instanceof WarrenError && e.code === 'conflict' && e.message === 'sandbox sb_9 is stopped' && e.details.state === 'stopped',
    );
    await assert.rejects(t.remote.resume('sb_9'), (e: WarrenError) => e.code === 'internal' && !e.message.includes('/host'));
  } finally {
    await t.close();
  }
});

test('file bodies stream in and out; a missing file fails before any byte', async () => {
  let written = Buffer.alloc(0);
  const big = Buffer.alloc(3 * 2 ** 20, 7);
  const t = await serve(
    fakeEdge({
      writeFile: async (id, path, body, mode) => {
        const parts: Buffer[] = [];
        for await (const c of body) parts.push(Buffer.from(c));
        written = Buffer.concat(parts);
        assert.deepEqual([id, path, mode], ['sb_1', '/data/ü', 0o644]);
      },
      readFile: async (_id, path) => {
        if (path === '/nope') throw new WarrenError('not_found', 'no such file', { path });
        return (async function* () {
          yield big.subarray(0, 2 ** 20);
          yield big.subarray(2 ** 20);
        })();
      },
    }),
  );
  try {
    await t.remote.writeFile('sb_1', '/data/ü', [Buffer.from('he'), Buffer.from('llo')] as unknown as AsyncIterable<Uint8Array>, 0o644);
    assert.equal(written.toString(), 'hello');
    const parts: Buffer[] = [];
    for await (const c of await t.remote.readFile('sb_1', '/big')) parts.push(Buffer.from(c));
    assert.ok(Buffer.concat(parts).equals(big));
    await assert.rejects(t.remote.readFile('sb_1', '/nope'), (e: WarrenError) => e.code === 'not_found' && e.details.path === '/nope');
  } finally {
    await t.close();
  }
});

test('a command streams its events with its id; a reader that stops while nothing comes is not held', async () => {
  const t = await serve(
    fakeEdge({
      exec: async () => ({
        commandId: 'cmd_7',
        events: pushIterable<ExecEvent>((push, end) => {
          push({ type: 'stdout', data: 'a\n' });
          push({ type: 'exit', exitCode: 0, signal: null, durationMs: 1, timedOut: false, truncated: false, killedBy: null, limitsHit: [] });
          end();
          return () => undefined;
        }),
      }),
      follow: async () => ({ commandId: 'cmd_8', events: pushIterable<ExecEvent>(() => () => undefined) }),
    }),
  );
  try {
    const s = await t.remote.exec('sb_1', { cmd: 'echo a' });
    assert.equal(s.commandId, 'cmd_7');
    const evs: ExecEvent[] = [];
    for await (const ev of s.events) evs.push(ev);
    assert.deepEqual(
      evs.map((e) => e.type),
      ['stdout', 'exit'],
    );
    const silent = await t.remote.follow('sb_1', 'cmd_8', 0);
    const it = silent.events[Symbol.asyncIterator]();
    const pending = it.next();
    await new Promise((r) => setTimeout(r, 20));
    await it.return?.();
    assert.deepEqual(await pending, { value: undefined, done: true });
  } finally {
    await t.close();
  }
});

test('events arrive in order from the number asked for; stopping the reader ends the stream at once', async () => {
  const ev = new EdgeEvents();
  ev.emit({ type: 'died', id: 'sb_0' });
  const t = await serve(fakeEdge({ events: (after) => pushIterable<EdgeEvent>((push) => ev.subscribe(push, after ?? ev.last)) }));
  try {
    const it = t.remote.events(0)[Symbol.asyncIterator]();
    const first = await it.next();
    assert.deepEqual(first.value, { type: 'died', id: 'sb_0', seq: 1 });
    const second = it.next();
    ev.emit({ type: 'expired', id: 'sb_1', reason: 'ttl' });
    assert.deepEqual((await second).value, { type: 'expired', id: 'sb_1', reason: 'ttl', seq: 2 });
    const third = it.next();
    await it.return?.();
    assert.equal((await third).done, true);
  } finally {
    await t.close();
  }
});

test('a call without the token is refused, and the edge is not called', async () => {
  let called = false;
  const t = await serve(
    fakeEdge({
      info: async () => {
        called = true;
        return {
          nodeId: 'n',
          boot: 'b',
          capacity: { cpu: 1, memoryMiB: 1, sandboxes: 1, maxCpuPerSandbox: 1, maxMemoryMiBPerSandbox: 1 },
          networking: false,
          maxFileBytes: 1,
          backends: [],
        };
      },
    }),
  );
  try {
    const wrong = remoteEdgeApi({ socketPath: t.socketPath, token: 'not-it' });
    await assert.rejects(wrong.info(), (e: WarrenError) => e.code === 'unauthenticated');
    wrong.disconnect();
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ socketPath: t.socketPath, method: 'POST', path: '/edge/v1/info' }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.once('error', reject);
      req.end('[]');
    });
    assert.equal(status, 401);
    assert.equal(called, false);
    assert.equal((await t.remote.info()).nodeId, 'n');
  } finally {
    await t.close();
  }
});

test('one connection carries call after call: a body the edge refused unread, a body read halfway, a download stopped early', async () => {
  let stoppedAt = -1;
  const t = await serve(
    fakeEdge({
      writeFile: async (_id, path, body) => {
        if (path === '/refused') throw new WarrenError('permission_denied', 'not there', { path });
        let n = 0;
        for await (const c of body) {
          n += c.length;
          if (n > 2 ** 20) throw new WarrenError('payload_too_large', 'too big', { n });
        }
      },
      readFile: async () =>
        (async function* () {
          let i = 0;
          try {
            for (; i < 1000; i++) yield Buffer.alloc(2 ** 16, i);
          } finally {
            stoppedAt = i;
          }
        })(),
      statPath: async (_id, path) => ({ path }) as never,
    }),
    'tok',
    1,
  );
  const eight = (n: number): AsyncIterable<Uint8Array> =>
    (async function* () {
      for (let i = 0; i < n; i++) yield Buffer.alloc(2 ** 18, i);
    })();
  try {
    await assert.rejects(
      t.remote.writeFile('sb_1', '/refused', eight(16)),
      (e: WarrenError) => e.code === 'permission_denied' && e.details.path === '/refused',
    );
    assert.deepEqual(await t.remote.statPath('sb_1', '/a'), { path: '/a' });
    await assert.rejects(t.remote.writeFile('sb_1', '/big', eight(64)), (e: WarrenError) => e.code === 'payload_too_large');
    assert.deepEqual(await t.remote.statPath('sb_1', '/b'), { path: '/b' });
    for await (const c of await t.remote.readFile('sb_1', '/x')) {
      assert.ok(c.length > 0 && c.every((x: number) => x === 0), 'the first bytes of the file');
      break;
    }
    assert.deepEqual(await t.remote.statPath('sb_1', '/c'), { path: '/c' }, 'a new connection after the stopped download');
    for (let i = 0; i < 100 && stoppedAt < 0; i++) await new Promise((r) => setImmediate(r));
    assert.ok(stoppedAt >= 0 && stoppedAt < 1000, `the edge stopped reading the file (at ${stoppedAt})`);
  } finally {
    await t.close();
  }
});

test('calls beyond the connections wait for one; a stream that fails halfway fails its reader; a broken peer is dropped', async () => {
  let open = 0;
  let most = 0;
  // The first calls wait until two are on the edge at once; the rest go through.
  let bothIn: () => void = () => undefined;
  const gate = new Promise<void>((r) => (bothIn = r));
  const t = await serve(
    fakeEdge({
      statPath: async (_id, path) => {
        most = Math.max(most, ++open);
        if (open === 2) bothIn();
        await gate;
        open--;
        return { path } as never;
      },
      getArchive: async () =>
        (async function* () {
          yield Buffer.from('part');
          throw new WarrenError('internal', 'the tar broke');
        })(),
    }),
    'tok',
    2,
  );
  try {
    const paths = Array.from({ length: 12 }, (_, i) => `/p${i}`);
    assert.deepEqual(
      await Promise.all(paths.map((p) => t.remote.statPath('sb_1', p))),
      paths.map((path) => ({ path })),
    );
    assert.equal(most, 2);
    const got: Buffer[] = [];
    await assert.rejects(
      (async () => {
        for await (const c of await t.remote.getArchive('sb_1', '/')) got.push(Buffer.from(c));
      })(),
      (e: WarrenError) => e.code === 'internal' && e.message === 'the tar broke',
    );
    assert.equal(Buffer.concat(got).toString(), 'part');
    // A peer that speaks nonsense after the upgrade is cut off; the edge serves on.
    const raw = connect(t.socketPath).resume();
    raw.write('GET /edge/v1 HTTP/1.1\r\nauthorization: Bearer tok\r\nconnection: upgrade\r\nupgrade: warren-edge/1\r\n\r\n');
    raw.write(Buffer.from([0, 0, 0, 1, 99, 0]));
    await new Promise((r) => raw.once('close', r));
    assert.deepEqual(await t.remote.statPath('sb_1', '/after'), { path: '/after' });
  } finally {
    await t.close();
  }
});

test('a tunnel (openPort) carries raw bytes both ways on a connection of its own; the edge’s refusal comes before it; disconnect closes it', async () => {
  // The sandbox's port: it speaks first (its bytes follow the edge's answer at once), then echoes.
  const port = createServer((s) => {
    s.write('hello;');
    s.pipe(s);
  });
  await new Promise<void>((r) => port.listen(0, '127.0.0.1', r));
  const at = (port.address() as AddressInfo).port;
  const t = await serve(
    fakeEdge({
      openPort: async (id, p) => {
        if (p !== at) throw new WarrenError('unavailable', `nothing listens on port ${p} in the sandbox`, { port: p });
        const s = connect({ host: '127.0.0.1', port: at });
        await once(s, 'connect');
        return s;
      },
      statPath: async (_id, path) => ({ path, type: 'file', size: 1, mode: 0o644, mtime: '' }) as never,
    }),
    'tok',
    1,
  );
  try {
    await assert.rejects(t.remote.openPort('sb_1', 1), (e: WarrenError) => e.code === 'unavailable' && /nothing listens on port 1/.test(e.message));
    const a = await t.remote.openPort('sb_1', at);
    const b = await t.remote.openPort('sb_1', at);
    // Tunnels hold no connection of the calls' (at most one here): calls go on meanwhile.
    assert.equal((await t.remote.statPath('sb_1', '/x')).path, '/x');
    const readUntil = (s: Duplex, want: string): Promise<string> =>
      new Promise((resolve) => {
        let got = '';
        const on = (d: Buffer): void => {
          got += d.toString();
          if (got.length >= want.length) {
            s.off('data', on);
            s.pause();
            resolve(got);
          }
        };
        s.on('data', on);
        s.resume();
      });
    const big = 'x'.repeat(3 << 20);
    const echoed = readUntil(a, `hello;ping;${big}`);
    a.write('ping;');
    a.write(big);
    assert.equal(await echoed, `hello;ping;${big}`);
    assert.equal(await readUntil(b, 'hello;'), 'hello;');
    t.remote.disconnect();
    await Promise.all([once(a, 'close'), once(b, 'close')]);
  } finally {
    await t.close();
    port.close();
  }
});

test('over TLS: calls and tunnels go to the edge whose certificate is pinned; another certificate gets not one byte, the token least of all', async () => {
  const cert = selfSignedCertificate('n1');
  const echo = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  const served = await listenEdgeApi(
    fakeEdge({
      statPath: async (_id, path) => ({ path, type: 'file', size: 1, mode: 0o644, mtime: '' }) as never,
      openPort: async () => {
        const s = connect({ host: '127.0.0.1', port: (echo.address() as AddressInfo).port });
        await once(s, 'connect');
        s.pause();
        return s;
      },
    }),
    { host: '127.0.0.1', port: 0 },
    { token: 'tok', tls: cert },
  );
  // An impostor at another address, with a certificate of its own: what reaches it is kept.
  const other = selfSignedCertificate('n1');
  const got: Buffer[] = [];
  const closed: Array<Promise<unknown>> = [];
  const impostor = createTlsServer({ key: other.key, cert: other.cert }, (s) => {
    s.on('data', (d: Buffer) => got.push(d));
    closed.push(once(s, 'close'));
  });
  await new Promise<void>((r) => impostor.listen(0, '127.0.0.1', r));
  const remote = remoteEdgeApi({ host: '127.0.0.1', port: served.port, token: 'tok', tls: { fingerprint: cert.fingerprint } });
  const fooled = remoteEdgeApi({ host: '127.0.0.1', port: (impostor.address() as AddressInfo).port, token: 'tok', tls: { fingerprint: cert.fingerprint } });
  const plain = remoteEdgeApi({ host: '127.0.0.1', port: served.port, token: 'tok' });
  try {
    assert.equal((await remote.statPath('sb_1', '/x')).path, '/x');
    const t = await remote.openPort('sb_1', 80);
    t.write('over tls');
    t.resume();
    const [echoed] = (await once(t, 'data')) as [Buffer];
    assert.equal(echoed.toString(), 'over tls');
    t.destroy();
    await assert.rejects(fooled.statPath('sb_1', '/x'), (e: WarrenError) => e.code === 'unavailable' && /certificate other than/.test(e.message));
    await Promise.all(closed);
    assert.equal(Buffer.concat(got).length, 0);
    await assert.rejects(plain.statPath('sb_1', '/x'), (e: WarrenError) => e.code === 'unavailable');
  } finally {
    for (const r of [remote, fooled, plain]) r.disconnect();
    await served.close();
    impostor.close();
    echo.close();
  }
});

test('a call in progress when the edge goes fails with unavailable, and so does a call after disconnect', async () => {
  let started: () => void = () => undefined;
  const begun = new Promise<void>((r) => (started = r));
  const t = await serve(
    fakeEdge({
      statPath: async () => {
        started();
        return new Promise(() => undefined);
      },
    }),
  );
  try {
    const call = t.remote.statPath('sb_1', '/hang');
    await begun;
    const closing = t.close();
    await assert.rejects(call, (e: WarrenError) => e.code === 'unavailable');
    await closing;
    await assert.rejects(t.remote.statPath('sb_1', '/x'), (e: WarrenError) => e.code === 'unavailable');
  } finally {
    await t.close().catch(() => undefined);
  }
});

test('an edge whose clock is off gets lifetimes on its own clock and answers on the caller’s; the caller knows the offset', async () => {
  const HOUR = 3_600_000;
  const events = new EdgeEvents();
  const got: Array<[string, number | null, number | null]> = [];
  const t = await serve(
    fakeEdge({
      info: async () => ({ nodeId: 'n', boot: 'b', capacity: {} as never, networking: false, maxFileBytes: 1, backends: [] }),
      create: async (spec) => {
        got.push(['create', spec.lastActivityMs, spec.expiresAtMs]);
        return { id: spec.id, paused: false, lastActivityMs: spec.lastActivityMs, expiresAtMs: spec.expiresAtMs, usage: null, network: null };
      },
      setExpiry: async (_id, ms) => void got.push(['setExpiry', null, ms]),
      sandboxes: async () => [{ id: 'sb_a', paused: false, lastActivityMs: Date.now() + HOUR, expiresAtMs: null, usage: null, network: null }],
      events: (after) => pushIterable<EdgeEvent>((push) => events.subscribe(push, after ?? events.last)),
    }),
    'tok',
    undefined,
    () => Date.now() + HOUR,
  );
  try {
    assert.equal(t.remote.clockOffsetMs(), null);
    const now = Date.now();
    const spec = {
      id: 'sb_a',
      layers: [],
      resources: { cpu: 1, memoryMiB: 1, pids: 1 },
      env: {},
      user: null,
      workdir: null,
      idleTimeoutMs: null,
      paused: false,
    };
    // The first timed call measures the edge's clock first.
    const made = await t.remote.create({ ...spec, lastActivityMs: now, expiresAtMs: now + 60_000 });
    const off = t.remote.clockOffsetMs()!;
    assert.ok(Math.abs(off - HOUR) < 50, String(off));
    assert.ok(Math.abs(got[0]![1]! - (now + HOUR)) < 50 && Math.abs(got[0]![2]! - (now + HOUR + 60_000)) < 50, JSON.stringify(got));
    assert.ok(Math.abs(made.lastActivityMs - now) < 50 && Math.abs(made.expiresAtMs! - (now + 60_000)) < 50, JSON.stringify(made));
    await t.remote.setExpiry('sb_a', now + 5000);
    assert.ok(Math.abs(got[1]![2]! - (now + HOUR + 5000)) < 50);
    const [listed] = await t.remote.sandboxes();
    assert.ok(Math.abs(listed!.lastActivityMs - Date.now()) < 50, String(listed!.lastActivityMs - Date.now()));
    const it = t.remote.events(0)[Symbol.asyncIterator]();
    events.emit({ type: 'state', id: 'sb_a', paused: true, expiresAtMs: now + HOUR + 60_000 });
    const ev = (await it.next()).value as EdgeEvent & { type: 'state' };
    assert.ok(Math.abs(ev.expiresAtMs! - (now + 60_000)) < 50, String(ev.expiresAtMs! - now));
    await it.return?.();
  } finally {
    await t.close();
  }
});
