// Writes the Python client's parts that come from the API contract: python/warren/_routes.py
// (every route's method and path) and the generated part of python/warren/errors.py (the error
// codes, their HTTP statuses, a class per code). packages/api's python-contract.test fails when
// the committed files differ from what this writes.
import { readFileSync, writeFileSync } from 'node:fs';
import { pythonErrors, pythonRoutes, withGenerated } from '../packages/api/dist/python-contract.js';

writeFileSync('python/warren/_routes.py', pythonRoutes());
const errors = withGenerated(readFileSync('python/warren/errors.py', 'utf8'), pythonErrors());
if (errors === null) throw new Error('python/warren/errors.py has no generated part (its markers are missing)');
writeFileSync('python/warren/errors.py', errors);
console.log('wrote python/warren/_routes.py and the generated part of python/warren/errors.py');
