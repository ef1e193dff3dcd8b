import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const DIST = dirname(fileURLToPath(import.meta.url));

/** The packages a compiled module loads when it is imported: its static imports, followed through our own files. */
function packagesLoaded(file: string, seen = new Set<string>(), out = new Set<string>()): Set<string> {
  if (seen.has(file)) return out;
  seen.add(file);
  const src = readFileSync(file, 'utf8');
  for (const m of src.matchAll(/^import\s+(?:[^'"]*?\sfrom\s+)?['"]([^'"]+)['"]/gm)) {
    const spec = m[1]!;
    if (spec.startsWith('.')) packagesLoaded(join(dirname(file), spec), seen, out);
    else out.add(spec);
  }
  return out;
}

test('client commands load the SDK, never the server (or its SQLite and edge)', () => {
  const commands = readdirSync(join(DIST, 'commands')).filter((f) => f.endsWith('.js'));
  assert.ok(commands.length >= 14, commands.join(' '));
  for (const f of commands) {
    const loaded = [...packagesLoaded(join(DIST, 'commands', f))];
    const server = loaded.filter((p) => p.startsWith('@warren/server') || p.startsWith('@warren/edge'));
    // up, server and edge run a node or a control plane (and down shares their code): the server is theirs to load.
    if (['up.js', 'server.js', 'edge.js'].includes(f)) assert.ok(server.includes('@warren/server'), `${f}: the analysis follows imports`);
    else if (f !== 'down.js') assert.deepEqual(server, [], `${f} loads ${server.join(', ')}`);
  }
  // The entry point itself loads nothing but the SDK until a command is named.
  assert.deepEqual([...packagesLoaded(join(DIST, 'main.js'))], ['@warren/sdk']);
});
