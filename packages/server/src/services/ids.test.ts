import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newSandboxId } from './ids.js';

test('sandbox ids: sb_, the time in base 36, 12 random hex digits; none repeats across refills of the random pool; later sorts after', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 5000; i++) {
    const id = newSandboxId(1_700_000_000_000);
    assert.match(id, /^sb_[0-9a-z]{9}[0-9a-f]{12}$/);
    seen.add(id.slice(12));
  }
  assert.equal(seen.size, 5000);
  assert.ok(newSandboxId(1_700_000_000_001) > newSandboxId(1_700_000_000_000));
});
