import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ROUTES, routePath, type PathParamNames, type RouteSpec, type WarrenError } from '@warren/api';
import { Router, type Handler } from './router.js';
import type { Authed } from './route-types.js';

test('routes match params and tell a wrong method from a missing path', async () => {
  const r = new Router();
  const h = async (): Promise<void> => undefined;
  r.add({ method: 'GET', path: '/v1/sandboxes/{id}' }, h);
  r.add({ method: 'POST', path: '/v1/sandboxes/batch' }, h);
  const m = r.match('GET', '/v1/sandboxes/sb_1');
  assert.ok(m && m !== 'method');
  assert.deepEqual(m.params, { id: 'sb_1' });
  assert.equal(r.match('PUT', '/v1/sandboxes/sb_1'), 'method');
  assert.equal(r.match('GET', '/v1/nothing'), null);
  assert.equal(r.match('GET', '/v1/sandboxes/a/b'), null);
  // A malformed escape is the caller's error, not the server's.
  assert.throws(
    () => r.match('GET', '/v1/sandboxes/%E0%A4%A'),
    (e: WarrenError) => e.code === 'invalid_argument',
  );
});

test('every route of the contract gets back the params the SDK put in its path, each one whole', () => {
  const r = new Router();
  const handlers = new Map<Handler, string>();
  for (const [name, spec] of Object.entries(ROUTES) as Array<[string, RouteSpec]>) {
    const h: Handler = async () => undefined;
    handlers.set(h, name);
    r.add(spec, h);
  }
  for (const [name, spec] of Object.entries(ROUTES) as Array<[string, RouteSpec]>) {
    // Values a path must carry inside one segment: a slash, a percent sign, a space, a non-ASCII letter.
    const params: Record<string, string> = {};
    for (const m of spec.path.matchAll(/\{(\w+)\}/g)) params[m[1] ?? ''] = `${m[1]} a/b%c é`;
    const m = r.match(spec.method, routePath(spec, params));
    assert.ok(m && m !== 'method', name);
    assert.equal(handlers.get(m.handler), name);
    assert.deepEqual(m.params, params, name);
  }
  // A `{name}` is never matched by an empty segment, so no route gets an empty parameter.
  for (const path of ['/v1/sandboxes//exec', '/v1/sandboxes/sb/commands//kill', '/v1/keys/']) assert.equal(r.match('POST', path), null, path);
  assert.equal(r.match('DELETE', '/v1/keys/'), null);
});

/**
 * Compile-time checks (tsc -b type-checks the tests): each `@ts-expect-error` asserts that the
 * line it marks does not compile, and tsc fails if it does; it does not silence a type. Never called.
 */
export function paramsAreTypedByTheRoute(
  get: Authed<typeof ROUTES.getSandbox>,
  output: Authed<typeof ROUTES.commandOutput>,
  info: Authed<typeof ROUTES.info>,
): string[] {
  const names: Array<PathParamNames<typeof ROUTES.commandOutput.path>> = ['id', 'commandId'];
  // @ts-expect-error -- getSandbox's path has no commandId
  void get.params.commandId;
  // @ts-expect-error -- info's path has no parameters at all
  void info.params.id;
  return [get.params.id, output.params.id, output.params.commandId, ...names];
}
