import { test } from 'node:test';
import assert from 'node:assert/strict';
import { plainCopy } from './plain-copy.js';

test('plainCopy copies plain data deeply: changing the copy never reaches the original', () => {
  const spec = {
    id: 'sb_1',
    layers: ['a', 'b'],
    resources: { cpu: 1, memoryMiB: 64, diskMiB: null },
    env: { A: '1' } as Record<string, string>,
    network: { egress: 'deny', allow: ['npm.example'], deny: [] as string[] },
    lease: { id: 'l_1', onExpiry: { action: 'pause' } },
    paused: false,
    user: null,
    missing: undefined,
  };
  const before = JSON.stringify(spec);
  const c = plainCopy(spec);
  assert.deepEqual(c, spec);
  assert.ok('missing' in c);
  c.layers.push('c');
  c.resources.cpu = 2;
  c.env.B = '2';
  c.network.allow[0] = 'other.example';
  c.lease.onExpiry.action = 'delete';
  assert.equal(JSON.stringify(spec), before);
  assert.notEqual(c.network, spec.network);
});

test('plainCopy copies what is not plain data by structured cloning, never by reference', () => {
  const src = { when: new Date(5), bytes: Buffer.from('ab'), map: new Map([['k', { v: 1 }]]), list: [new Uint8Array([1, 2])] };
  const c = plainCopy(src);
  assert.notEqual(c.when, src.when);
  assert.equal(c.when.getTime(), 5);
  assert.notEqual(c.map, src.map);
  assert.deepEqual(c.map.get('k'), { v: 1 });
  assert.notEqual(c.list[0], src.list[0]);
  assert.deepEqual([...c.list[0]!], [1, 2]);
  c.list[0]![0] = 9;
  assert.equal(src.list[0]![0], 1);
  assert.notEqual(c.bytes, src.bytes);
});

test('plainCopy keeps primitives and objects without a prototype', () => {
  for (const v of [0, 'x', true, null, undefined, 1n]) assert.equal(plainCopy(v), v);
  const bare = Object.assign(Object.create(null) as Record<string, unknown>, { a: { b: 1 } });
  const c = plainCopy(bare);
  assert.deepEqual({ ...c }, { a: { b: 1 } });
  assert.notEqual(c.a, bare.a);
});

test('plainCopy refuses a function and keeps an own __proto__ key a key', () => {
  assert.throws(() => plainCopy({ f: () => 1 }), TypeError);
  const odd = JSON.parse('{"__proto__": {"polluted": true}, "a": 1}') as Record<string, unknown>;
  const c = plainCopy(odd);
  assert.equal(Object.getPrototypeOf(c), Object.prototype);
  assert.equal((c as { polluted?: boolean }).polluted, undefined);
  assert.deepEqual(Object.keys(c), ['__proto__', 'a']);
  assert.notEqual(Object.getOwnPropertyDescriptor(c, '__proto__')?.value, odd['__proto__']);
});
