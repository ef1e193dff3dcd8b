import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OutputBudget, defaultOutputBudget, takeFromAll } from './output-budget.js';

test('the output budget grants what is left and takes back what is given', () => {
  const b = new OutputBudget(100);
  assert.equal(b.take(60), 60);
  assert.equal(b.take(60), 40);
  assert.equal(b.spent, true);
  assert.equal(b.take(1), 0);
  b.give(50);
  assert.equal(b.used, 50);
  assert.equal(b.spent, false);
  b.give(500);
  assert.equal(b.used, 0);
  assert.equal(defaultOutputBudget(24 * 2 ** 30), 3 * 2 ** 30);
  // Taken from several (the node's and a tenant's share): the least left wins, none keeps more.
  const node = new OutputBudget(100);
  const share = new OutputBudget(30);
  assert.equal(takeFromAll([node, share], 50), 30);
  assert.equal(node.used, 30);
  assert.equal(share.used, 30);
  assert.equal(takeFromAll([node, share], 5), 0);
  assert.equal(node.used, 30);
  assert.equal(defaultOutputBudget(512 * 2 ** 30), 4 * 2 ** 30);
});
