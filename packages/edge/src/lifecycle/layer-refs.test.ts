import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LayerRefs } from './layer-refs.js';

test('a layer is in use while a sandbox stands on it; the last one to go lets it go', () => {
  const r = new LayerRefs();
  r.hold(['base', 'ws1']);
  r.hold(['base', 'ws2', 'ws2']);
  assert.deepEqual([...r.inUse()].sort(), ['base', 'ws1', 'ws2']);
  assert.deepEqual(r.release(['base', 'ws2', 'ws2']), ['ws2']);
  assert.deepEqual([...r.inUse()].sort(), ['base', 'ws1']);
  assert.deepEqual(r.release(['base', 'ws1']).sort(), ['base', 'ws1']);
  assert.deepEqual([...r.inUse()], []);
});
