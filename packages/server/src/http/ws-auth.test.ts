import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { wsCredentials } from './ws-auth.js';

const code = (c: string) => (e: unknown) => e instanceof WarrenError && e.code === c;
const offer = (key: string): string => `warren.bearer.${Buffer.from(key).toString('base64url')}`;

test('a key offered as a subprotocol beside warren becomes the bearer; the answer is warren', () => {
  assert.deepEqual(wsCredentials({ 'sec-websocket-protocol': `warren, ${offer('wk_abc')}` }), { authorization: 'Bearer wk_abc', protocol: 'warren' });
  // Authorization wins when both come (a program's client); warren is still answered if offered.
  assert.deepEqual(wsCredentials({ authorization: 'Bearer x', 'sec-websocket-protocol': `warren, ${offer('y')}` }), {
    authorization: 'Bearer x',
    protocol: 'warren',
  });
  assert.deepEqual(wsCredentials({ authorization: 'Bearer x' }), { authorization: 'Bearer x', protocol: null });
  assert.deepEqual(wsCredentials({}), { authorization: undefined, protocol: null });
});

test('a key offered without warren, two keys, or one not base64url is refused', () => {
  assert.throws(() => wsCredentials({ 'sec-websocket-protocol': offer('k') }), code('invalid_argument'));
  assert.throws(() => wsCredentials({ 'sec-websocket-protocol': `warren, ${offer('a')}, ${offer('b')}` }), code('invalid_argument'));
  assert.throws(() => wsCredentials({ 'sec-websocket-protocol': 'warren, warren.bearer.a+b/c=' }), code('unauthenticated'));
  assert.throws(() => wsCredentials({ 'sec-websocket-protocol': 'warren, warren.bearer.' }), code('unauthenticated'));
  assert.throws(() => wsCredentials({ 'sec-websocket-protocol': `warren, warren.bearer.${'a'.repeat(513)}` }), code('unauthenticated'));
});
