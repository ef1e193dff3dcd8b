import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from './errors.js';
import { ROUTES } from './routes.js';
import { routePath, type PathParamNames, type PathParams } from './route-path.js';

// Compile-time checks (tsc -b type-checks the tests): each `@ts-expect-error` below asserts that
// the line it marks is rejected, and tsc fails the build if it is not. It does not silence a type.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const same = <A, B>(ok: Same<A, B>): boolean => ok;

test('a path template names its parameters: the ones in braces, none for a path without any', () => {
  assert.ok(same<PathParamNames<typeof ROUTES.commandOutput.path>, 'id' | 'commandId'>(true));
  assert.ok(same<PathParams<typeof ROUTES.getSandbox.path>, { id: string }>(true));
  assert.ok(same<PathParamNames<typeof ROUTES.listSandboxes.path>, never>(true));
  assert.ok(same<PathParams<typeof ROUTES.getBlob.path>, { file: string }>(true));
  // The route table keeps each path as its literal: without that, every route took any params.
  assert.ok(same<typeof ROUTES.deleteKey.path, '/v1/keys/{keyId}'>(true));
  // @ts-expect-error -- asserts that getSandbox's params are not `{}` (the test fails to compile otherwise)
  assert.ok(same<PathParams<typeof ROUTES.getSandbox.path>, Record<never, string>>(true));
  // A path known only as a string takes any params.
  assert.ok(same<PathParams<string>, Record<string, string>>(true));
});

test('routePath fills each parameter percent-encoded, so a value stays one segment', () => {
  assert.equal(routePath(ROUTES.getSandbox, { id: 'sb_1' }), '/v1/sandboxes/sb_1');
  assert.equal(routePath(ROUTES.commandOutput, { id: 'sb_1', commandId: 'c 1' }), '/v1/sandboxes/sb_1/commands/c%201');
  assert.equal(routePath(ROUTES.deleteImage, { name: 'acme/py:3.12' }), '/v1/images/acme%2Fpy%3A3.12');
  assert.equal(routePath(ROUTES.deleteLayer, { name: '../x?y#z%' }), '/v1/layers/..%2Fx%3Fy%23z%25');
  assert.equal(routePath(ROUTES.getSandbox, { id: 'é' }), '/v1/sandboxes/%C3%A9');
  assert.equal(routePath(ROUTES.listSandboxes, {}), '/v1/sandboxes');
});

test('routePath refuses a missing or empty parameter before anything is sent', () => {
  const refused = (e: unknown): boolean => e instanceof WarrenError && e.code === 'invalid_argument' && e.message.includes('sessionId');
  // @ts-expect-error -- asserts that a missing parameter does not compile; a caller in plain JS gets the error
  assert.throws(() => routePath(ROUTES.deleteSession, { id: 'sb_1' }), refused);
  // An empty one would make another path: `/v1/blobs/{file}` with no file is the blob listing.
  assert.throws(() => routePath(ROUTES.deleteSession, { id: 'sb_1', sessionId: '' }), refused);
  assert.throws(
    () => routePath(ROUTES.getBlob, { file: '' }),
    (e: unknown) => e instanceof WarrenError && e.code === 'invalid_argument',
  );
});
