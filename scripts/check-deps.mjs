// Checks the package dependency graph written down in STYLE: who may import whom, no deep imports.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** @type {Record<string, string[]>} */
export const ALLOWED = {
  api: [],
  images: ['api'],
  edge: ['api', 'images'],
  server: ['api', 'images', 'edge'],
  sdk: ['api'],
  cli: ['api', 'sdk', 'server', 'images'],
  test: ['api', 'sdk', 'server', 'images', 'edge'],
  bench: ['api', 'sdk', 'server', 'images', 'edge'],
  'examples/rollout': ['sdk'],
};

function files(dir, out = []) {
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) files(p, out);
    else if (n.endsWith('.ts')) out.push(p);
  }
  return out;
}

const problems = [];
for (const [pkg, allowed] of Object.entries(ALLOWED)) {
  const src = pkg === 'test' || pkg === 'bench' || pkg.startsWith('examples/') ? join(pkg, 'src') : join('packages', pkg, 'src');
  let list = [];
  try {
    list = files(src);
  } catch {
    continue;
  }
  for (const f of list) {
    const text = readFileSync(f, 'utf8');
    for (const m of text.matchAll(/from\s+'(@warren\/[^']+)'|import\('(@warren\/[^']+)'\)/g)) {
      const spec = m[1] ?? m[2];
      const [, name, ...deep] = spec.split('/');
      if (deep.length) problems.push(`${f}: deep import ${spec}`);
      if (name !== pkg && !allowed.includes(name)) problems.push(`${f}: ${pkg} may not import @warren/${name}`);
    }
  }
}
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log('dependency rules hold');
