import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { PY_BEGIN, PY_END, pythonContract, pythonErrors, withGenerated } from './python-contract.js';

const file = (name: string): string => readFileSync(new URL(`../../../python/warren/${name}`, import.meta.url), 'utf8');

test("the Python client's route table and error classes are the contract's (node scripts/gen-python.mjs writes them)", () => {
  assert.equal(file('_contract.py'), pythonContract(), 'python/warren/_contract.py drifted from the contract: run node scripts/gen-python.mjs');
  const errors = file('errors.py');
  assert.equal(withGenerated(errors, pythonErrors()), errors, 'python/warren/errors.py drifted from the contract: run node scripts/gen-python.mjs');
});

test('the generated part of a file is found between its markers, and only there', () => {
  assert.equal(withGenerated(`a\n${PY_BEGIN}\nold\n${PY_END}\nb`, 'NEW'), 'a\nNEW\nb');
  assert.equal(withGenerated('no markers', 'NEW'), null);
  assert.match(pythonErrors(), /class NotFoundError\(WarrenError\):\n {4}code = "not_found"/);
  assert.match(pythonContract(), /"getSandbox": \("GET", "\/v1\/sandboxes\/\{id\}"\),/);
  assert.match(pythonContract(), /"timeoutMs": 60000/);
});
