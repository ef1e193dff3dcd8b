// Writes docs/openapi.json from the API schemas (the same document GET /v1/openapi.json serves).
import { writeFileSync } from 'node:fs';
import { buildOpenApi } from '../packages/api/dist/index.js';

const version = JSON.parse((await import('node:fs')).readFileSync('package.json', 'utf8')).version;
writeFileSync('docs/openapi.json', JSON.stringify(buildOpenApi(version), null, 2) + '\n');
console.log('wrote docs/openapi.json');
