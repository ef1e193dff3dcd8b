// Writes docs/api.md, the HTTP API reference, from docs/openapi.json (which gen-openapi.mjs writes
// from the schemas the server validates with). Standard library only; the same input gives the same
// bytes. Run after gen-openapi.mjs (npm run openapi does both).
import { readFileSync, writeFileSync } from 'node:fs';

const INPUT = 'docs/openapi.json';
const OUTPUT = 'docs/api.md';
/** Object properties nested deeper than this are summarised as their type only. */
const MAX_DEPTH = 3;
const METHODS = ['get', 'put', 'post', 'patch', 'delete', 'head', 'options'];

const doc = JSON.parse(readFileSync(INPUT, 'utf8'));

/** Escapes text for a table cell or a line of prose: `<`, `>` outside code spans, `|`, newlines. */
function inline(text) {
  const parts = String(text).replace(/\r?\n/g, ' ').split('`');
  return parts
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/</g, '&lt;').replace(/>/g, '&gt;')))
    .join('`')
    .replace(/\|/g, '\\|');
}

/** The schema a `$ref` into this document names, or the schema itself. */
function deref(schema) {
  let s = schema ?? {};
  for (let hops = 0; s.$ref !== undefined && hops < 8; hops++) {
    const path = s.$ref.replace(/^#\//, '').split('/');
    s = path.reduce((node, key) => node?.[key], doc) ?? {};
  }
  return s;
}

/** The name of the component a schema refers to, if any. */
function refName(schema) {
  return schema?.$ref?.startsWith('#/components/schemas/') ? schema.$ref.split('/').pop() : null;
}

/** A short type: `string`, `integer`, `"a" | "b"`, `array of object`, `map of number`. */
function typeOf(schema) {
  const name = refName(schema);
  if (name !== null) return name;
  const s = deref(schema);
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(' | ');
  const alts = s.anyOf ?? s.oneOf;
  if (Array.isArray(alts)) return alts.map(typeOf).join(' or ');
  if (Array.isArray(s.allOf)) return s.allOf.map(typeOf).join(' and ');
  if (Array.isArray(s.type)) return s.type.join(' or ');
  if (s.type === 'array') return `array of ${typeOf(s.items ?? {})}`;
  if (s.type === 'object' && s.properties === undefined && isMap(s)) {
    return `map of ${typeOf(s.additionalProperties)}`;
  }
  if (s.type === 'string' && s.format !== undefined) return `string (${s.format})`;
  return s.type ?? 'any';
}

function isMap(s) {
  return typeof s.additionalProperties === 'object' && s.additionalProperties !== null;
}

/** Constraints worth a reader's eye: default, bounds, lengths, pattern. */
function constraints(schema) {
  const s = deref(schema);
  const out = [];
  if (s.default !== undefined) out.push(`default \`${JSON.stringify(s.default)}\``);
  const lo = s.exclusiveMinimum !== undefined ? `> ${s.exclusiveMinimum}` : s.minimum;
  const hi = s.exclusiveMaximum !== undefined ? `< ${s.exclusiveMaximum}` : s.maximum;
  if (typeof lo === 'number' && typeof hi === 'number') out.push(`${lo}–${hi}`);
  else {
    const bounds = [typeof lo === 'number' ? `≥ ${lo}` : lo, typeof hi === 'number' ? `≤ ${hi}` : hi];
    if (bounds.some((x) => x !== undefined)) out.push(bounds.filter((x) => x !== undefined).join(', '));
  }
  if (s.minLength !== undefined && s.maxLength !== undefined) {
    out.push(`${s.minLength}–${s.maxLength} chars`);
  } else if (s.maxLength !== undefined) out.push(`≤ ${s.maxLength} chars`);
  else if (s.minLength !== undefined) out.push(`≥ ${s.minLength} chars`);
  if (s.minItems !== undefined) out.push(`≥ ${s.minItems} items`);
  if (s.maxItems !== undefined) out.push(`≤ ${s.maxItems} items`);
  if (s.pattern !== undefined) out.push(`pattern \`${s.pattern}\``);
  return out;
}

/** The object schemas whose fields a schema's rows should list (itself, array items, alternatives). */
function objectParts(schema) {
  const s = deref(schema);
  if (s.type === 'object' && s.properties !== undefined) return [s];
  if (s.type === 'array') return objectParts(s.items ?? {});
  if (isMap(s)) return objectParts(s.additionalProperties);
  const alts = s.anyOf ?? s.oneOf ?? s.allOf;
  if (Array.isArray(alts)) return alts.flatMap(objectParts);
  return [];
}

/** The suffix a nested field's path takes: `[]` for array items, `.*` for map values. */
function pathSuffix(schema) {
  const s = deref(schema);
  if (s.type === 'array') return `[]${pathSuffix(s.items ?? {})}`;
  if (s.type === 'object' && s.properties === undefined && isMap(s)) {
    return `.*${pathSuffix(s.additionalProperties)}`;
  }
  return '';
}

/** Table rows for an object's fields, nested fields as dotted paths down to MAX_DEPTH. */
function fieldRows(schema, prefix, depth, rows) {
  for (const part of objectParts(schema)) {
    const required = new Set(part.required ?? []);
    for (const [name, prop] of Object.entries(part.properties ?? {})) {
      const path = `${prefix}${name}`;
      const p = deref(prop);
      const text = [p.description ?? prop.description, ...constraints(prop)].filter(Boolean);
      rows.push(`| \`${path}\` | ${inline(typeOf(prop))} | ${required.has(name) ? 'yes' : ''} | ` + `${inline(text.join('; '))} |`);
      if (objectParts(prop).length > 0 && refName(prop) === null) {
        if (depth + 1 < MAX_DEPTH) fieldRows(prop, `${path}${pathSuffix(prop)}.`, depth + 1, rows);
      }
    }
  }
  return rows;
}

/** A schema as Markdown: a field table for objects, one line otherwise. */
function renderSchema(schema) {
  const name = refName(schema);
  if (name !== null) return [`[${name}](#${name.toLowerCase()})`];
  const s = deref(schema);
  const rows = fieldRows(s, '', 0, []);
  if (rows.length === 0) {
    const more = [s.description, ...constraints(s)].filter(Boolean).join('; ');
    return [`${inline(typeOf(s))}${more === '' ? '' : `: ${inline(more)}`}`];
  }
  const head = s.type === 'object' ? [] : [`${inline(typeOf(s))}:`, ''];
  return [...head, '| field | type | required | description |', '|---|---|---|---|', ...rows];
}

/** Request or response content: each media type and its schema. */
function renderContent(content) {
  const lines = [];
  for (const [type, media] of Object.entries(content ?? {})) {
    const schema = media.schema ?? {};
    const s = deref(schema);
    if (s.type === 'string' && refName(schema) === null && s.properties === undefined) {
      lines.push(`\`${type}\`${s.description ? `: ${inline(s.description)}` : ''}`, '');
      continue;
    }
    lines.push(`\`${type}\`:`, '', ...renderSchema(schema), '');
  }
  return lines;
}

function renderParameters(parameters) {
  if (!Array.isArray(parameters) || parameters.length === 0) return [];
  const rows = parameters.map((raw) => {
    const p = deref(raw);
    const text = [p.description, ...constraints(p.schema ?? {})].filter(Boolean).join('; ');
    return `| \`${p.name}\` | ${p.in} | ${inline(typeOf(p.schema ?? {}))} | ${p.required ? 'yes' : ''} | ${inline(text)} |`;
  });
  return ['Parameters:', '', '| name | in | type | required | description |', '|---|---|---|---|---|', ...rows, ''];
}

function renderResponses(responses) {
  const lines = [];
  for (const [status, raw] of Object.entries(responses ?? {})) {
    const r = deref(raw);
    const media = Object.entries(r.content ?? {});
    const errorOnly = media.length === 1 && refName(media[0][1].schema) === 'Error' && status === 'default';
    if (errorOnly) {
      lines.push(`- \`${status}\`: an [Error](#error)`);
      continue;
    }
    lines.push(`- \`${status}\`: ${inline(r.description ?? '')}`);
    if (media.length > 0) {
      lines.push('', ...renderContent(r.content).map((l) => (l === '' ? '' : `  ${l}`)));
    }
  }
  return ['Responses:', '', ...lines, ''];
}

/** An operation: heading, summary, description, parameters, body, responses. */
function renderOperation(method, path, op) {
  const anchor = `<a id="${anchorOf(method, path, op)}"></a>`;
  const lines = [`### ${method.toUpperCase()} \`${path}\``, '', anchor, ''];
  if (op.summary) lines.push(inline(op.summary), '');
  if (op.description) lines.push(...op.description.split(/\r?\n/).map(inline), '');
  const auth = Array.isArray(op.security) && op.security.length === 0 ? 'no API key' : 'an API key (bearer)';
  lines.push(`Operation \`${op.operationId ?? `${method} ${path}`}\`; ${auth}.`, '');
  lines.push(...renderParameters(op.parameters));
  if (op.requestBody !== undefined) {
    const body = deref(op.requestBody);
    lines.push(`Request body${body.required ? '' : ' (optional)'}:`, '', ...renderContent(body.content));
  }
  lines.push(...renderResponses(op.responses));
  return lines;
}

/** The anchor an operation's heading carries: its operationId, else its method and path. */
function anchorOf(method, path, op) {
  const id = op.operationId ?? `${method}-${path}`;
  return `op-${id.replace(/[^A-Za-z0-9_-]+/g, '-')}`;
}

/** A summary cut to about `max` characters at a word boundary. */
function shorten(text, max) {
  if (text.length <= max) return text;
  const cut = text.slice(0, max);
  return `${cut.slice(0, Math.max(cut.lastIndexOf(' '), 1))} …`;
}

/** The group an operation is listed under: the path's first segment after the version. */
function groupOf(path) {
  const parts = path.split('/').filter(Boolean);
  return parts[0] === 'v1' ? (parts[1] ?? '/') : parts[0];
}

function render() {
  const out = [
    '# HTTP API reference',
    '',
    '<!-- Generated by scripts/gen-api-doc.mjs from docs/openapi.json (npm run openapi). Do not edit. -->',
    '',
    `${inline(doc.info?.title ?? 'API')} ${doc.info?.version ?? ''} (OpenAPI ${doc.openapi}; the server serves the`,
    'same document at `GET /v1/openapi.json`). Every call takes an API key as a bearer token',
    '(`Authorization: Bearer wk_...`) unless it says otherwise; every error is an [Error](#error).',
    '',
  ];
  const groups = new Map();
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of Object.keys(item).filter((m) => METHODS.includes(m))) {
      const group = groupOf(path);
      if (!groups.has(group)) groups.set(group, []);
      groups.get(group).push([method, path, item[method]]);
    }
  }
  out.push('## Contents', '', '| method | path | summary |', '|---|---|---|');
  for (const ops of groups.values()) {
    for (const [method, path, op] of ops) {
      const summary = inline(shorten(op.summary ?? '', 100));
      const link = `[\`${path}\`](#${anchorOf(method, path, op)})`;
      out.push(`| ${method.toUpperCase()} | ${link} | ${summary} |`);
    }
  }
  out.push('');
  if (doc.info?.description) {
    out.push('## Notes', '', ...doc.info.description.split(/\r?\n/).map((l) => `- ${inline(l)}`), '');
  }
  for (const [group, ops] of groups) {
    out.push(`## ${group}`, '');
    for (const [method, path, op] of ops) out.push(...renderOperation(method, path, op));
  }
  const hooks = Object.entries(doc.webhooks ?? {});
  if (hooks.length > 0) {
    out.push('## Webhooks', '', "Requests Warren sends to the operator's webhook URLs.", '');
    for (const [name, item] of hooks) {
      for (const method of Object.keys(item).filter((m) => METHODS.includes(m))) {
        out.push(...renderOperation(method, name, item[method]));
      }
    }
  }
  out.push('## Components', '');
  for (const [name, schema] of Object.entries(doc.components?.schemas ?? {})) {
    out.push(`### ${name}`, '', ...renderSchema(schema), '');
  }
  return `${out
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trimEnd()}\n`;
}

writeFileSync(OUTPUT, render());
console.log(`wrote ${OUTPUT}`);
