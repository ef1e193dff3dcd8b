import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { CLIENT_FRAMES, REPLIES, REQUESTS, docMarkers, protocolHeader, withDocTables } from './protocol.js';
import { REPLY, REQ } from './frame.js';

const repo = (path: string): string => readFileSync(new URL(`../../../../${path}`, import.meta.url), 'utf8');

test("the init's C header and the doc's frame tables are the protocol table's (node scripts/gen-init-protocol.mjs writes them)", () => {
  assert.equal(repo('native/init/protocol.h'), protocolHeader(), 'native/init/protocol.h drifted from init/protocol.ts: run npm run gen:init-protocol');
  const doc = repo('docs/init-protocol.md');
  assert.equal(withDocTables(doc), doc, "docs/init-protocol.md's frame tables drifted from init/protocol.ts: run npm run gen:init-protocol");
});

test('the init names its frame kinds from the header: no type byte written as a character in its frames or its dispatch', () => {
  const dir = 'native/init';
  const literal = [/conn_(final|send)\([^,;]+, '.'/, /\b(op|type) [!=]= '.'/, /case '.':/];
  const found: string[] = [];
  for (const name of readdirSync(new URL(`../../../../${dir}`, import.meta.url)).filter((n) => n.endsWith('.c'))) {
    const text = repo(`${dir}/${name}`);
    // Field keys (`case 'p':` over a request's fields) are per operation, not frame kinds.
    if (name === 'setup-spec.c') continue;
    text.split('\n').forEach((line, i) => {
      if (literal.some((re) => re.test(line))) found.push(`${name}:${i + 1}: ${line.trim()}`);
    });
  }
  assert.deepEqual(found, []);
});

test('one type byte per frame kind in each direction; the edge speaks what the table says', () => {
  const types = (t: Record<string, { type: string }>): string[] => Object.values(t).map((k) => k.type);
  for (const t of [REQUESTS, CLIENT_FRAMES, REPLIES]) assert.equal(new Set(types(t)).size, types(t).length);
  // Requests and the frames after them share the edge's side: none may be taken for the other.
  assert.deepEqual(
    types(REQUESTS).filter((x) => types(CLIENT_FRAMES).includes(x)),
    [],
  );
  assert.equal(REQ.exec, 'E');
  assert.equal(REQ.eof, 'j');
  assert.equal(REPLY.failed, 'f');
  assert.match(protocolHeader(), /^#define REQ_SIGNAL_COMMAND +'K'$/m);
  const [begin, end] = docMarkers('replies');
  assert.equal(withDocTables(`${begin}\nold\n${end}`), null, 'a doc without every table is refused');
});
