// Checks the package dependency graph written down in STYLE: who may import whom, no deep imports.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

/** @type {Record<string, string[]>} */
export const ALLOWED = {
  api: [],
  images: ['api'],
  edge: ['api', 'images'],
  server: ['api', 'images', 'edge'],
  sdk: ['api'],
  cli: ['api', 'sdk', 'server', 'edge', 'images'],
  test: ['api', 'sdk', 'server', 'images', 'edge'],
  bench: ['api', 'sdk', 'server', 'images', 'edge'],
  'examples/rollout': ['sdk'],
  // The dashboard runs in a browser: the contract's types only (import type), none of its code.
  dashboard: ['api'],
};

/**
 * Folders inside the edge package, and which others each may import: the agent protocol and the
 * host at the bottom, the lifecycle on top. The lifecycle reaches a backend only through its
 * interface (backends/backend.ts), never a backend's own files. `node` (the edge assembling
 * itself: its backends, host, network, the Edge, the EdgeApi served, joins) sits on top of all,
 * and nothing below imports it.
 * @type {Record<string, string[]>}
 */
export const EDGE_FOLDERS = {
  util: [],
  init: ['util'],
  host: ['util', 'net'],
  net: ['util', 'host'],
  fn: ['util', 'init'],
  backends: ['util', 'init', 'host'],
  lifecycle: ['util', 'init', 'host', 'net', 'fn', 'backends/backend.ts'],
  'edge-api': ['util', 'lifecycle', 'fn', 'init', 'backends/backend.ts'],
  node: ['util', 'init', 'host', 'net', 'fn', 'backends', 'lifecycle', 'edge-api'],
};

/**
 * What of the edge's barrel is the node's own parts: the server reaches a node through
 * openEdgeNode (and an edge elsewhere through the EdgeApi), never by building one (its tests may
 * build an Edge over a simulated backend).
 */
export const NODE_PARTS = [
  'Edge',
  'ContainerBackend',
  'MicrovmBackend',
  'SimulatedBackend',
  'HostHelper',
  'CgroupV1',
  'SandboxNetwork',
  'openSandboxDisk',
  'openNodeSwap',
  'guestKit',
  'chooseAccel',
  'readOwnCgroupParent',
  'localEdgeApi',
  'listenEdgeApi',
  'serveEdgeApi',
  'selfSignedCertificate',
  'startEdge',
  'startSimulatedEdge',
];

/**
 * Folders inside the server package, and which others each may import: the store at the bottom,
 * then the cluster's membership, placement, the services, the compatibility layers and the HTTP
 * routes on top (compat reaches only the HTTP helpers it shares). The files at the package's
 * root (control-plane.ts, node.ts, start.ts) assemble the rest and may import any.
 * @type {Record<string, string[]>}
 */
export const SERVER_FOLDERS = {
  store: [],
  testing: ['store'],
  cluster: ['store'],
  placement: ['cluster', 'store'],
  services: ['placement', 'cluster', 'store'],
  compat: ['services', 'placement', 'cluster', 'store', 'http/io.ts', 'http/audit-call.ts', 'http/route-types.ts'],
  http: ['compat', 'services', 'placement', 'cluster', 'store'],
};

function files(dir, out = []) {
  for (const n of readdirSync(dir)) {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) files(p, out);
    else if (n.endsWith('.ts') || n.endsWith('.tsx')) out.push(p);
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
// The dashboard takes types from the contract, never its code (zod and all would go to the browser).
for (const f of files(join('packages', 'dashboard', 'src')))
  for (const m of readFileSync(f, 'utf8').matchAll(/^import\s+(?!type\s)[^;]*from\s+'@warren\/[^']+'/gm))
    problems.push(`${f}: the dashboard imports the contract's types only (import type): ${m[0]}`);
// The server opens its node through the edge package and never builds one from the node's parts.
for (const f of files(join('packages', 'server', 'src'))) {
  if (f.endsWith('.test.ts')) continue;
  const text = readFileSync(f, 'utf8');
  for (const m of text.matchAll(/import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+'@warren\/edge'/g))
    for (const part of m[1].split(',')) {
      const name = part
        .trim()
        .replace(/^type\s+/, '')
        .split(/\s+as\s+/)[0];
      if (NODE_PARTS.includes(name)) problems.push(`${f}: the server may not import ${name} from @warren/edge: it is the node's (openEdgeNode)`);
    }
}
/** Holds a package's folders to their rules: a file in a folder imports only its own folder's files and those its rule names. */
function checkFolders(pkg, rules) {
  const src = join('packages', pkg, 'src');
  for (const f of files(src)) {
    const rel = relative(src, f);
    const folder = rel.split(sep)[0];
    if (!(folder in rules)) continue;
    const text = readFileSync(f, 'utf8');
    for (const m of text.matchAll(/from\s+'(\.[^']+)'|import\('(\.[^']+)'\)/g)) {
      const target = relative(src, resolve(dirname(f), (m[1] ?? m[2]).replace(/\.js$/, '.ts')));
      const to = target.split(sep)[0];
      if (to === folder || target.startsWith('..')) continue;
      // A test may use the package's test helpers (a store on PostgreSQL, say).
      if (to === 'testing' && f.endsWith('.test.ts')) continue;
      const allowed = rules[folder];
      if (!allowed.includes(to) && !allowed.includes(target)) problems.push(`${f}: ${pkg}/${folder} may not import ${pkg}/${target}`);
    }
  }
}
checkFolders('edge', EDGE_FOLDERS);
checkFolders('server', SERVER_FOLDERS);
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log('dependency rules hold');
