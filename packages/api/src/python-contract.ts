import { ERROR_CODES, STATUS_BY_CODE } from './errors.js';
import { ROUTES } from './routes.js';
import { DEFAULTS } from './defaults.js';

/** Where the generated part of a Python file begins and ends (the rest of the file is written by hand). */
export const PY_BEGIN = '# --- generated from the API contract by scripts/gen-python.mjs: do not edit by hand ---';
export const PY_END = '# --- end of the generated part ---';

/** `not_found` → `NotFoundError`. */
const className = (code: string): string => code.replace(/(^|_)([a-z])/g, (_m, _u, c: string) => c.toUpperCase()) + 'Error';

/** python/warren/_contract.py, whole: every route of the contract as (method, path template), and the defaults. */
export function pythonContract(): string {
  const rows = Object.entries(ROUTES).map(([name, spec]) => `    ${JSON.stringify(name)}: (${JSON.stringify(spec.method)}, ${JSON.stringify(spec.path)}),`);
  return [
    '"""The Warren API\'s contract as the client needs it: every route\'s method and path template (``{id}``',
    'and the like are filled in by :func:`warren._wire.route`), and what the server does with what a',
    'request leaves out. Generated from packages/api (routes.ts, defaults.ts) by',
    '``node scripts/gen-python.mjs``; a test fails when it drifts from it."""',
    '',
    'from typing import Any, Dict, Tuple',
    '',
    PY_BEGIN,
    'ROUTES: Dict[str, Tuple[str, str]] = {',
    ...rows,
    '}',
    '',
    `DEFAULTS: Dict[str, Any] = ${JSON.stringify(DEFAULTS, null, 4).replace(/\n/g, '\n')}`,
    PY_END,
    '',
  ].join('\n');
}

/** The generated part of python/warren/errors.py: the codes with their HTTP statuses, and a class per code. */
export function pythonErrors(): string {
  const status = ERROR_CODES.map((c) => `    ${JSON.stringify(c)}: ${STATUS_BY_CODE[c]},`);
  const classes = ERROR_CODES.flatMap((c) => ['', '', `class ${className(c)}(WarrenError):`, `    code = ${JSON.stringify(c)}`]);
  const table = ERROR_CODES.map((c) => `        ${className(c)},`);
  return [
    PY_BEGIN,
    'STATUS_BY_CODE: Dict[str, int] = {',
    ...status,
    '}',
    ...classes,
    '',
    '',
    'ERROR_CLASSES: Dict[str, Type[WarrenError]] = {',
    '    c.code: c',
    '    for c in (',
    ...table,
    '    )',
    '}',
    PY_END,
  ].join('\n');
}

/** A file's text with its generated part (between PY_BEGIN and PY_END) replaced by `part`; null when it has no such part. */
export function withGenerated(text: string, part: string): string | null {
  const a = text.indexOf(PY_BEGIN);
  const b = text.indexOf(PY_END);
  if (a < 0 || b < a) return null;
  return text.slice(0, a) + part + text.slice(b + PY_END.length);
}
