import { test } from 'node:test';
import assert from 'node:assert/strict';
import { argvToScript, envList, shellQuote } from './shell.js';

test('quoting keeps every byte literal', () => {
  assert.equal(shellQuote('abc'), 'abc');
  assert.equal(shellQuote("it's $HOME"), `'it'\\''s $HOME'`);
  assert.equal(argvToScript(['echo', 'a b', '$(x)']), `echo 'a b' '$(x)'`);
});

test('later env maps win', () => {
  assert.deepEqual(envList({ A: '1', B: '2' }, undefined, { B: '3' }), ['A=1', 'B=3']);
});
