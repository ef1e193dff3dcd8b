import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { EDGE_CALLS } from './wire.js';

const doc = (name: string): string => readFileSync(new URL(`../../../../docs/${name}`, import.meta.url), 'utf8');

test('docs/edge-api.md names every EdgeApi call', () => {
  const text = doc('edge-api.md');
  const missing = Object.keys(EDGE_CALLS).filter((c) => !text.includes(`\`${c}\``));
  assert.deepEqual(missing, [], `docs/edge-api.md does not name ${missing.join(', ')}`);
});

// docs/init-protocol.md's frame tables are generated from init/protocol.ts (init/protocol.test.ts holds them).
