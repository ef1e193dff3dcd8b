import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { buildOpenApi } from './openapi.js';

test('the committed docs/openapi.json matches the schemas (run `npm run openapi` after changing them)', () => {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  const committed = JSON.parse(readFileSync(new URL('../../../docs/openapi.json', import.meta.url), 'utf8')) as unknown;
  assert.deepEqual(committed, JSON.parse(JSON.stringify(buildOpenApi(pkg.version))));
});

test('every route has a response and every path parameter is declared', () => {
  const doc = buildOpenApi('0') as {
    paths: Record<string, Record<string, { parameters: Array<{ name: string; in: string }>; responses: Record<string, unknown> }>>;
  };
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const op of Object.values(ops)) {
      assert.ok(Object.keys(op.responses).length >= 2, path);
      for (const m of path.matchAll(/\{(\w+)\}/g))
        assert.ok(
          op.parameters.some((p) => p.in === 'path' && p.name === m[1]),
          `${path} declares ${m[1]}`,
        );
    }
  }
});
