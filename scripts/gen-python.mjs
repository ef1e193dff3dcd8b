// Writes the Python client's parts that come from the API contract: python/warren/_contract.py
// (every route's method and path, the defaults) and the generated part of python/warren/errors.py (the error
// codes, their HTTP statuses, a class per code). packages/api's python-contract.test fails when
// the committed files differ from what this writes.
import { readFileSync, writeFileSync } from 'node:fs';
import { pythonContract, pythonErrors, withGenerated } from '../packages/api/dist/python-contract.js';

writeFileSync('python/warren/_contract.py', pythonContract());
const errors = withGenerated(readFileSync('python/warren/errors.py', 'utf8'), pythonErrors());
if (errors === null) throw new Error('python/warren/errors.py has no generated part (its markers are missing)');
writeFileSync('python/warren/errors.py', errors);
console.log('wrote python/warren/_contract.py and the generated part of python/warren/errors.py');
