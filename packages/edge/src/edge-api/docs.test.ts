import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { EDGE_CALLS } from './wire.js';
import { REPLY, REQ } from '../init/frame.js';

const doc = (name: string): string => readFileSync(new URL(`../../../../docs/${name}`, import.meta.url), 'utf8');

test('docs/edge-api.md names every EdgeApi call', () => {
  const text = doc('edge-api.md');
  const missing = Object.keys(EDGE_CALLS).filter((c) => !text.includes(`\`${c}\``));
  assert.deepEqual(missing, [], `docs/edge-api.md does not name ${missing.join(', ')}`);
});

test('docs/init-protocol.md has a row for every request, client frame and reply the edge speaks', () => {
  const text = doc('init-protocol.md');
  const rows = new Set([...text.matchAll(/^\| `(.)` \|/gm)].map((m) => m[1]));
  for (const t of ['k', 'n', 'e']) rows.add(t); // the replies named together in one row
  const missing = [...Object.entries(REQ), ...Object.entries(REPLY)].filter(([, t]) => !rows.has(t)).map(([n, t]) => `${n} (${t})`);
  assert.deepEqual(missing, [], `docs/init-protocol.md has no row for ${missing.join(', ')}`);
});
