// Writes what comes from the init protocol's one table (packages/edge/src/init/protocol.ts): the
// C header warren-init is built with (native/init/protocol.h) and the frame tables of
// docs/init-protocol.md (between their markers). packages/edge's protocol.test fails when the
// committed files differ from what this writes. Run after `tsc -b` (npm run openapi does both).
import { readFileSync, writeFileSync } from 'node:fs';
import { protocolHeader, withDocTables } from '../packages/edge/dist/init/protocol.js';

writeFileSync('native/init/protocol.h', protocolHeader());
const doc = withDocTables(readFileSync('docs/init-protocol.md', 'utf8'));
if (doc === null) throw new Error("docs/init-protocol.md lacks a generated table's markers");
writeFileSync('docs/init-protocol.md', doc);
console.log('wrote native/init/protocol.h and the frame tables of docs/init-protocol.md');
