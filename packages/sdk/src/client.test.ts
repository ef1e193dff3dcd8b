import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
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
