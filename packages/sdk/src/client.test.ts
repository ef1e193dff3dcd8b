import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ROUTES, WarrenError } from '@warren/api';
import { Warren, connect } from './client.js';
import type { FetchLike } from './transport.js';

/** A strict fake: each expected call in order, anything else fails the test. */
function fakeFetch(expect: Array<{ method: string; url: string; status: number; body: unknown; check?: (init: RequestInit) => void }>): FetchLike {
  return async (url, init) => {
    const e = expect.shift();
    assert.ok(e, `unexpected ${init?.method ?? 'GET'} ${url}`);
    assert.equal(init?.method, e.method);
    assert.equal(url, e.url);
    e.check?.(init ?? {});
    return new Response(typeof e.body === 'string' ? e.body : JSON.stringify(e.body), { status: e.status });
  };
}

test('errors from the server come back as the same WarrenError', async () => {
  const w = new Warren({
    url: 'http://w/',
    apiKey: 'k',
    fetch: fakeFetch([
      {
        method: 'GET',
        url: 'http://w/v1/sandboxes/sb_x',
        status: 404,
        body: { error: { code: 'not_found', message: 'sandbox sb_x does not exist', details: { id: 'sb_x' } } },
      },
    ]),
  });
  await assert.rejects(w.sandboxes.get('sb_x'), (e: unknown) => e instanceof WarrenError && e.code === 'not_found' && e.details.id === 'sb_x');
});

test('label filters repeat in the query and the key goes in the header', async () => {
  const w = new Warren({
    url: 'http://w',
    apiKey: 'secret',
    fetch: fakeFetch([
      {
        method: 'GET',
        url: 'http://w/v1/sandboxes?label=job%3Drl&label=n%3D1&state=running',
        status: 200,
        body: { sandboxes: [], nextCursor: null },
        check: (init) => assert.equal((init.headers as Record<string, string>).authorization, 'Bearer secret'),
      },
    ]),
  });
  const r = await w.sandboxes.list({ labels: { job: 'rl', n: '1' }, state: 'running' });
  assert.deepEqual(r, { sandboxes: [], nextCursor: null });
});

test('connect reads WARREN_URL and WARREN_API_KEY only when options are absent', async () => {
  const seen: string[] = [];
  const f: FetchLike = async (url) => {
    seen.push(url);
    return new Response(JSON.stringify({ images: [] }), { status: 200 });
  };
  await connect({ fetch: f }, { WARREN_URL: 'http://env:1', WARREN_API_KEY: 'e' }).images();
  await connect({ fetch: f, url: 'http://opt:2' }, { WARREN_URL: 'http://env:1' }).images();
  assert.deepEqual(seen, ['http://env:1/v1/images', 'http://opt:2/v1/images']);
});

test('an unreachable server is unavailable, not a raw network error', async () => {
  const w = new Warren({ url: 'http://127.0.0.1:1', apiKey: 'k' });
  await assert.rejects(w.images(), (e: unknown) => e instanceof WarrenError && e.code === 'unavailable');
});

test("every call the client makes is a route of the contract's table, its path parameters encoded", async () => {
  const seen: Array<[string, string]> = [];
  const f: FetchLike = async (url, init) => {
    seen.push([init?.method ?? 'GET', new URL(url).pathname]);
    // Enough of every answer for the client to go on: a sandbox's id, a session's.
    return new Response(JSON.stringify({ id: 'sb/1', sessionId: 's 1' }), { status: 200 });
  };
  const w = new Warren({ url: 'http://w', apiKey: 'k', fetch: f });
  const sb = await w.sandboxes.create({ image: 'busybox:latest' });
  await sb.refresh();
  await sb.pause();
  await sb.resume();
  await sb.files.stat('/etc');
  await sb.files.mkdir('/x');
  await sb.files.move('/x', '/y');
  await sb.files.remove('/y');
  await sb.kill('c/1', 'SIGTERM');
  const sh = await sb.shell();
  await sh.close();
  await w.deleteImage('team/img:v1');
  await w.deleteLayer('team/layer');
  await w.revokeKey('k_0123456789abcdef');
  await w.pools.delete('pool_1');
  await w.sandboxes.batch('pause', { job: 'a' });
  await w.info();
  await sb.delete();
  const routes = Object.values(ROUTES).map((r) => ({ method: r.method, re: new RegExp(`^${r.path.replace(/\{\w+\}/g, '[^/]+')}$`) }));
  for (const [method, path] of seen)
    assert.ok(
      routes.some((r) => r.method === method && r.re.test(path)),
      `${method} ${path} is no route of the table`,
    );
  assert.ok(
    seen.some(([, p]) => p === '/v1/sandboxes/sb%2F1/commands/c%2F1/kill'),
    'ids are percent-encoded into the path',
  );
  assert.ok(seen.some(([, p]) => p === '/v1/images/team%2Fimg%3Av1'));
  assert.equal(seen.length, 18);
});

test('Promise.all on one shell sends its commands in the order called, each once the one before was taken', async () => {
  // The fake server answers only when the test says: what it has been sent meanwhile shows
  // when the shell sends each command.
  const sent: string[] = [];
  const answer: Array<(status: number) => void> = [];
  const f: FetchLike = async (url, init) => {
    if (new URL(url).pathname.endsWith('/sessions')) return new Response(JSON.stringify({ sessionId: 'ss_1_000000000000' }), { status: 201 });
    if (new URL(url).pathname === '/v1/sandboxes') return new Response(JSON.stringify({ id: 'sb_1' }), { status: 201 });
    const { cmd } = JSON.parse(init?.body as string) as { cmd: string };
    sent.push(cmd);
    const status = await new Promise<number>((resolve) => answer.push(resolve));
    if (status !== 200) return new Response(JSON.stringify({ error: { code: 'invalid_argument', message: 'no', details: {} } }), { status });
    if ((init?.headers as Record<string, string>).accept === 'application/x-ndjson')
      return new Response(
        `{"type":"start","commandId":"cmd_${cmd}"}\n{"type":"exit","exitCode":0,"signal":null,"durationMs":1,"timedOut":false,"truncated":false}\n`,
      );
    const r = { commandId: `cmd_${cmd}`, stdout: cmd, stderr: '', exitCode: 0, signal: null, durationMs: 1, timedOut: false, truncated: false };
    return new Response(JSON.stringify(r), { status: 200 });
  };
  const sh = await (await new Warren({ url: 'http://w', apiKey: 'k', fetch: f }).sandboxes.create({ image: 'busybox:latest' })).shell();
  // Everything the shell would do on its own is done once the event loop has gone round idle.
  const settled = async (): Promise<void> => {
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  };
  const stream = sh.execStream('b');
  const all = Promise.all([sh.exec('a'), stream.next(), sh.exec('c'), sh.exec('d').catch((e: unknown) => e), sh.exec('e')]);
  await settled();
  assert.deepEqual(sent, ['a']);
  answer.shift()!(200);
  await settled();
  assert.deepEqual(sent, ['a', 'b']);
  // A stream is taken with its first event: the next command goes while it is still open.
  answer.shift()!(200);
  await settled();
  assert.deepEqual(sent, ['a', 'b', 'c']);
  answer.shift()!(200);
  await settled();
  // A command that fails lets the next one go too.
  answer.shift()!(400);
  await settled();
  assert.deepEqual(sent, ['a', 'b', 'c', 'd', 'e']);
  answer.shift()!(200);
  const [a, b, c, d, e] = await all;
  assert.deepEqual(
    [a.stdout, b.value, c.stdout, (d as WarrenError).code, e.stdout],
    ['a', { type: 'start', commandId: 'cmd_b' }, 'c', 'invalid_argument', 'e'],
  );
  await stream.return(undefined);
});
