import { readFile } from 'node:fs/promises';
import type { DefaultImageName } from '@warren/images';
import { parseEndpointFlag } from '@warren/edge';
import { edgeNetworks, webhookUrl, type WarrenOptions } from '@warren/server';
import { parseFnPool, parseHosts, positiveInt } from './args.js';
import { DEFAULT_DATA_DIR, DEFAULT_IMAGE_CACHE } from './client.js';

/**
 * What `warren up`, `warren server` and `warren edge` start: a node's options, whether its
 * sandboxes outlive it, and the cluster's (the control plane to join, the join token, where the
 * edge listens and is reached, when a silent node is down).
 */
export type UpOptions = Omit<WarrenOptions, 'logger'> & {
  keepSandboxes: boolean;
  /** `warren edge --simulate`: what the simulated node promises. */
  simulate?: { cpu: number; memoryMiB: number; sandboxes: number };
  join?: string;
  joinToken?: string;
  listen?: { host: string; port: number };
  advertise?: string;
  downAfterMs?: number;
  edgeNetworks?: string[];
  requireEdgeTls?: boolean;
  tls?: boolean;
};

/** The commands that start something: each takes the options whose `for` names it. */
export type NodeCommand = 'up' | 'server' | 'edge';

type Value = string | boolean | string[];

/**
 * One option of a node, written once: its flag (or environment variable), its default, its line
 * in `warren help`, and where it goes in WarrenOptions. `warren up`'s flags, its help and the
 * options it starts the node with are all made from NODE_OPTIONS.
 */
export interface NodeOption {
  /** The flag, without `--`; none: from the environment only. */
  flag?: string;
  /** The environment variable it is read from (a flag wins). */
  env?: string;
  type: 'string' | 'boolean';
  multiple?: boolean;
  default?: string | boolean;
  /** What `warren help` shows: the flag's form and what it does (none: not shown). */
  usage?: [form: string, help: string];
  /** Puts the value into the options (called in table order; an option left unset is skipped). */
  set: (o: UpOptions, v: Value) => void | Promise<void>;
  /** The commands it is an option of (default: up and edge, what a node's edge is made of). */
  for?: NodeCommand[];
}

const ALL: NodeCommand[] = ['up', 'server', 'edge'];
const CONTROL: NodeCommand[] = ['up', 'server'];
const CLUSTER: NodeCommand[] = ['server', 'edge'];
const forCommand = (n: NodeOption, cmd: NodeCommand): boolean => (n.for ?? ['up', 'edge']).includes(cmd);

/** `cpu=N,memoryMiB=N,sandboxes=N`: what a simulated node promises. */
function parseCapacity(v: string): { cpu: number; memoryMiB: number; sandboxes: number } {
  const c = { cpu: 0, memoryMiB: 0, sandboxes: 0 };
  for (const part of v.split(',')) {
    const [k, n] = part.split('=');
    if (k !== 'cpu' && k !== 'memoryMiB' && k !== 'sandboxes') throw new Error(`--simulate takes cpu=, memoryMiB= and sandboxes=, not "${part}"`);
    c[k] = positiveInt(n ?? '', `--simulate ${k}`);
  }
  if (!c.cpu || !c.memoryMiB || !c.sandboxes) throw new Error('--simulate needs cpu=, memoryMiB= and sandboxes=');
  return c;
}

/** `host:port` (an IPv6 host in brackets). */
function hostPort(v: string, flag: string): { host: string; port: number } {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:\s]+):(\d{1,5})$/.exec(v);
  if (!m) throw new Error(`${flag} is HOST:PORT`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, '$1'), port: Number(m[2]) };
}

const num = (v: Value): number => Number(v);
const str = (v: Value): string => String(v);
/** A wall clock `offsetMs` off this machine's (a node whose clock is wrong, for tests). */
const skewedClock =
  (offsetMs: number): (() => number) =>
  () =>
    Date.now() + offsetMs;
/** Sets network options, unless --no-network (earlier in the table) turned networking off. */
const inNet = (o: UpOptions, set: (n: Exclude<WarrenOptions['network'], false | undefined>) => void): void => {
  if (o.network === false) return;
  const n = o.network ?? {};
  o.network = n;
  set(n);
};
/** Sets blob store options, if --blob-url (earlier in the table) named one. */
const inBlob = (o: UpOptions, set: (b: NonNullable<WarrenOptions['blobStore']>) => void): void => {
  if (o.blobStore) set(o.blobStore);
};

export const NODE_OPTIONS: NodeOption[] = [
  { flag: 'port', type: 'string', default: '7070', usage: ['[--port 7070]', 'the API port'], set: (o, v) => void (o.port = num(v)), for: CONTROL },
  {
    flag: 'host',
    type: 'string',
    default: '127.0.0.1',
    usage: ['[--host 127.0.0.1]', 'the address it listens on'],
    set: (o, v) => void (o.host = str(v)),
    for: CONTROL,
  },
  {
    flag: 'join',
    type: 'string',
    usage: ['--join URL', 'the control plane this node joins (any replica, or their load balancer)'],
    set: (o, v) => void (o.join = str(v)),
    for: ['edge'],
  },
  {
    flag: 'token',
    env: 'WARREN_JOIN_TOKEN',
    type: 'string',
    usage: ['[--token T]', 'the cluster’s join token (or WARREN_JOIN_TOKEN, which keeps it out of ps)'],
    set: (o, v) => void (o.joinToken = str(v)),
    for: CLUSTER,
  },
  {
    flag: 'name',
    type: 'string',
    usage: ['--name NAME', 'the node’s name in the cluster'],
    set: (o, v) => void (o.nodeId = str(v)),
    for: ['edge'],
  },
  {
    flag: 'listen',
    type: 'string',
    default: '0.0.0.0:7071',
    usage: ['[--listen 0.0.0.0:7071]', 'where its edge protocol listens for the control plane'],
    set: (o, v) => void (o.listen = hostPort(str(v), '--listen')),
    for: ['edge'],
  },
  {
    flag: 'advertise',
    type: 'string',
    usage: ['[--advertise HOST:PORT]', 'where the others reach it: an edge, its control plane; a server, the other replicas (default: where it listens)'],
    set: (o, v) => {
      hostPort(str(v), '--advertise'); // checked; kept as written (an IPv6 host in brackets)
      o.advertise = str(v);
    },
    for: ['edge', 'server'],
  },
  {
    flag: 'simulate',
    type: 'string',
    usage: [
      '[--simulate cpu=N,memoryMiB=N,sandboxes=N]',
      'a simulated node: the real edge’s admission, accounting and protocol, but no sandboxes are made (for scale tests)',
    ],
    set: (o, v) => void (o.simulate = parseCapacity(str(v))),
    for: ['edge'],
  },
  {
    flag: 'edge-networks',
    type: 'string',
    usage: [
      '[--edge-networks CIDR,...]',
      'the networks edges join from: a join naming another address is refused, nothing dialled (default: loopback and the private ranges)',
    ],
    set: (o, v) => {
      edgeNetworks(str(v).split(',')); // checked here: a bad CIDR stops the start with its name
      o.edgeNetworks = str(v).split(',');
    },
    for: ['server'],
  },
  {
    flag: 'require-edge-tls',
    type: 'boolean',
    default: false,
    usage: ['[--require-edge-tls]', 'refuse edges whose edge protocol is plain TCP (each must start with --tls)'],
    set: (o, v) => void (o.requireEdgeTls = v === true),
    for: ['server'],
  },
  {
    flag: 'tls',
    type: 'boolean',
    default: false,
    usage: ['[--tls]', 'the edge protocol over TLS: a certificate made at each start, pinned by the control plane at the join'],
    set: (o, v) => void (o.tls = v === true),
    for: ['edge'],
  },
  {
    flag: 'node-down-seconds',
    type: 'string',
    default: '10',
    usage: ['[--node-down-seconds 10]', 'a node without a heartbeat this long is down: no creates, its sandboxes failed'],
    set: (o, v) => void (o.downAfterMs = positiveInt(str(v), '--node-down-seconds') * 1000),
    for: ['server'],
  },
  {
    flag: 'data-dir',
    type: 'string',
    default: DEFAULT_DATA_DIR,
    usage: ['[--data-dir DIR]', 'state, layers and sandboxes'],
    set: (o, v) => void (o.dataDir = str(v)),
    for: ALL,
  },
  {
    flag: 'database',
    env: 'WARREN_DATABASE',
    type: 'string',
    usage: ['[--database postgres://…]', 'the control plane’s state in PostgreSQL (default: SQLite in the data dir)'],
    set: (o, v) => void (o.database = str(v) || undefined),
    for: CONTROL,
  },
  {
    flag: 'image-cache',
    type: 'string',
    default: DEFAULT_IMAGE_CACHE,
    usage: ['[--image-cache DIR]', 'where the default images are built once'],
    set: (o, v) => void (o.imageCacheDir = str(v)),
    for: ALL,
  },
  {
    flag: 'keep-sandboxes',
    type: 'boolean',
    default: false,
    usage: ['[--keep-sandboxes]', 'sandboxes outlive the node; its next start takes them back'],
    set: (o, v) => void (o.keepSandboxes = v === true),
    for: ['up', 'edge'],
  },
  {
    flag: 'images',
    type: 'string',
    usage: ['[--images NAME,...]', 'which default images to make'],
    set: (o, v) => void (o.images = str(v).split(',') as DefaultImageName[]),
    for: ALL,
  },
  { env: 'WARREN_API_KEY', type: 'string', set: (o, v) => void (o.adminKey = str(v)), for: CONTROL },
  {
    flag: 'runtime',
    type: 'string',
    default: 'native',
    usage: ['[--runtime native|runc]', 'how sandbox inits start'],
    set: (o, v) => {
      if (v !== 'native' && v !== 'runc') throw new Error('--runtime is native or runc');
      o.runtime = v;
    },
  },
  {
    flag: 'blob-url',
    type: 'string',
    usage: [
      '[--blob-url URL]',
      'read layers this node lacks on demand from a blob store: a registry repository oci://HOST/REPO (oci+http:// for plain HTTP), or another node’s http://HOST:7070/v1/blobs/ with WARREN_BLOB_KEY=its admin key; WARREN_BLOB_USER/WARREN_BLOB_PASSWORD for a store that wants Basic auth',
    ],
    set: (o, v) => void (o.blobStore = { url: str(v) }),
    for: ALL,
  },
  {
    flag: 'blob-cache-gib',
    type: 'string',
    default: '20',
    usage: ['[--blob-cache-gib 20]', 'what the blob store’s cache may hold'],
    set: (o, v) => inBlob(o, (b) => void (b.cacheMaxBytes = num(v) * 2 ** 30)),
  },
  { env: 'WARREN_BLOB_KEY', type: 'string', set: (o, v) => inBlob(o, (b) => void (b.key = str(v))), for: ALL },
  { env: 'WARREN_BLOB_USER', type: 'string', set: (o, v) => inBlob(o, (b) => ((b.username = str(v)), (b.password ??= ''))) },
  { env: 'WARREN_BLOB_PASSWORD', type: 'string', set: (o, v) => inBlob(o, (b) => void (b.username !== undefined && (b.password = str(v)))) },
  {
    flag: 'no-network',
    type: 'boolean',
    default: false,
    usage: ['[--no-network]', 'sandboxes get loopback only'],
    set: (o, v) => void (v === true && (o.network = false)),
  },
  {
    flag: 'egress-hosts',
    type: 'string',
    usage: ['[--egress-hosts FILE]', 'names the egress proxy resolves from FILE (hosts(5) lines) before DNS'],
    set: async (o, v) => {
      if (o.network === false) return;
      const hosts = parseHosts(await readFile(str(v), 'utf8'));
      inNet(o, (n) => void (n.hosts = hosts));
    },
  },
  {
    flag: 'sandbox-subnet',
    type: 'string',
    usage: ['[--sandbox-subnet CIDR]', 'the sandboxes’ /18 (default: a free one in 10.200.0.0/13)'],
    set: (o, v) => inNet(o, (n) => void (n.subnet = str(v))),
  },
  {
    flag: 'deny-networks',
    type: 'string',
    usage: [
      '[--deny-networks CIDR,...]',
      'no sandbox reaches these whatever its rules (the cluster’s own hosts: replicas, database, other nodes; those a join names are added)',
    ],
    set: (o, v) => inNet(o, (n) => void (n.deny = str(v).split(','))),
  },
  {
    flag: 'dns-rate',
    type: 'string',
    usage: ['[--dns-rate N]', 'DNS queries a sandbox may send per second, a burst of 2N first (default 1000)'],
    set: (o, v) => inNet(o, (n) => void (n.dnsQueriesPerSecond = positiveInt(str(v), '--dns-rate'))),
  },
  {
    flag: 'endpoint',
    type: 'string',
    multiple: true,
    usage: [
      '[--endpoint NAME=http://HOST:PORT]...',
      'a target sandboxes whose rules name it ("endpoints": ["NAME"]) reach at http://NAME.warren.internal/, each request with its X-Warren-Sandbox-Token (WARREN_ENDPOINT_SECRET: the tokens’ HMAC key, default one kept in the data dir)',
    ],
    set: (o, v) =>
      inNet(o, (n) => {
        const targets: Record<string, string> = {};
        for (const spec of v as string[]) {
          const e = parseEndpointFlag(spec);
          if (targets[e.name]) throw new Error(`--endpoint ${e.name} is given twice`);
          targets[e.name] = spec.slice(e.name.length + 1);
        }
        n.endpoints = targets;
      }),
  },
  { env: 'WARREN_ENDPOINT_SECRET', type: 'string', set: (o, v) => inNet(o, (n) => void (n.endpointSecret = str(v) || undefined)) },
  {
    flag: 'endpoint-rate',
    type: 'string',
    usage: ['[--endpoint-rate N]', 'requests a sandbox may send to one endpoint per second, a burst of 2N first (default 50)'],
    set: (o, v) => inNet(o, (n) => void (n.endpointRequestsPerSecond = positiveInt(str(v), '--endpoint-rate'))),
  },
  {
    flag: 'default-backend',
    type: 'string',
    usage: ['[--default-backend container|microvm|vm]', 'the backend of a create that names none (default container)'],
    set: (o, v) => {
      if (v !== 'container' && v !== 'microvm' && v !== 'vm') throw new Error('--default-backend is container, microvm or vm');
      o.defaultBackend = v;
    },
    for: CONTROL,
  },
  {
    flag: 'no-microvm',
    type: 'boolean',
    default: false,
    usage: ['[--no-microvm]', 'no microVM backend on this node, even with QEMU and the guest kernel there'],
    set: (o, v) => void (v === true && (o.microvm = false)),
  },
  {
    flag: 'ksm',
    type: 'boolean',
    default: false,
    usage: ['[--ksm]', "samepage merging on while the node runs: microVMs' like pages kept once (a timing channel between tenants: for nodes of one tenant)"],
    set: (o, v) => void (v === true && o.microvm !== false && (o.microvm = { ...o.microvm, ksm: true })),
  },
  {
    flag: 'no-microvm-dax',
    type: 'boolean',
    default: false,
    usage: ['[--no-microvm-dax]', "microVMs' image layers as virtio disks, each guest caching what it reads, not mapped into the guests (DAX)"],
    set: (o, v) => void (v === true && o.microvm !== false && (o.microvm = { ...o.microvm, dax: false })),
  },
  {
    flag: 'no-vm',
    type: 'boolean',
    default: false,
    usage: ['[--no-vm]', 'no full-VM backend on this node, even with QEMU and its guest kernel there'],
    set: (o, v) => void (v === true && (o.vm = false)),
  },
  {
    flag: 'no-zram-swap',
    type: 'boolean',
    default: false,
    usage: ['[--no-zram-swap]', 'no compressed swap for paused sandboxes'],
    set: (o, v) => void (v === true && (o.swap = false)),
  },
  {
    flag: 'zram-swap-mib',
    type: 'string',
    usage: [
      '[--zram-swap-mib N]',
      'compressed swap in RAM for paused sandboxes (set up now, removed at stop; default: half the memory, unless the host has swap)',
    ],
    set: (o, v) => void (o.swap !== false && (o.swap = { zramMiB: num(v) })),
  },
  {
    flag: 'cpu-overcommit',
    type: 'string',
    usage: ['[--cpu-overcommit 128]', 'CPU limits may add up to the CPUs × this'],
    set: (o, v) => void ((o.overcommit ??= {}).cpu = num(v)),
  },
  {
    flag: 'cpu-busy',
    type: 'string',
    usage: ['[--cpu-busy 0.9]', 'creates wait while the sandboxes use more than the CPUs × this'],
    set: (o, v) => void ((o.overcommit ??= {}).busy = num(v)),
  },
  {
    flag: 'memory-overcommit',
    type: 'string',
    usage: [
      '[--memory-overcommit X]',
      'memory requests are admitted up to the memory × this (default: the memory plus what zram holds beyond its footprint at 2:1)',
    ],
    set: (o, v) => void ((o.overcommit ??= {}).memory = num(v)),
  },
  {
    flag: 'max-sandboxes',
    type: 'string',
    usage: ['[--max-sandboxes N]', 'sandboxes the node holds at most (default 16384, or a third of kernel.pid_max if fewer)'],
    set: (o, v) => void (o.maxSandboxes = positiveInt(str(v), '--max-sandboxes')),
  },
  {
    flag: 'memory-floor-mib',
    type: 'string',
    usage: ['[--memory-floor-mib N]', 'available memory kept by paging out, then pausing, the longest-idle sandboxes (0: off)'],
    set: (o, v) => void (o.memoryFloorMiB = num(v)),
  },
  {
    flag: 'sandbox-memory-mib',
    type: 'string',
    usage: ['[--sandbox-memory-mib N]', 'a memory limit on all sandboxes together (their parent cgroup), the node’s memory for admission and pressure'],
    set: (o, v) => void (o.sandboxMemoryMiB = positiveInt(str(v), '--sandbox-memory-mib')),
  },
  {
    flag: 'no-disk-quotas',
    type: 'boolean',
    default: false,
    usage: ['[--no-disk-quotas]', 'sandboxes’ writable layers in plain directories (a create asking for diskMiB is refused)'],
    set: (o, v) => void (v === true && (o.disk = false)),
  },
  {
    flag: 'sandbox-disk-gib',
    type: 'string',
    usage: [
      '[--sandbox-disk-gib N]',
      'sandboxes’ writable layers on a btrfs image of N GiB (sparse; default 80 % of free space past the reserve), each limited to its diskMiB (default 10 GiB)',
    ],
    set: (o, v) => void (o.disk !== false && (o.disk = { sizeGiB: num(v) })),
  },
  {
    flag: 'disk-reserve-mib',
    type: 'string',
    usage: [
      '[--disk-reserve-mib N]',
      'kept free on the data disk for Warren’s own state: imports, uploads, pulls and commits that would reach into it are refused (default 5 %, 256 MiB to 2 GiB)',
    ],
    set: (o, v) => void (o.dataDiskReserveMiB = positiveInt(str(v), '--disk-reserve-mib')),
  },
  {
    flag: 'fn-pool',
    type: 'string',
    multiple: true,
    usage: ['[--fn-pool IMAGE[:LANGUAGE]=N]...', 'FnCall workers kept warm (up, server: on every node; edge: on this one; python: its zygote started too)'],
    set: (o, v) => void ((o.fn ??= {}).pools = (v as string[]).map(parseFnPool)),
    for: ALL,
  },
  {
    flag: 'fn-max-workers',
    type: 'string',
    usage: ['[--fn-max-workers N]', 'FnCall workers per image on this node'],
    set: (o, v) => void ((o.fn ??= {}).maxWorkersPerImage = num(v)),
  },
  {
    flag: 'fn-queue-limit',
    type: 'string',
    usage: ['[--fn-queue-limit N]', 'FnCall calls a tenant may have waiting on a node (and in one request)'],
    set: (o, v) => void ((o.fn ??= {}).queueLimit = num(v)),
    for: ALL,
  },
  {
    flag: 'pull-registries',
    type: 'string',
    usage: ['[--pull-registries HOST[:PORT],...]', 'registries non-admin keys may pull from (default: none)'],
    set: (o, v) => void (o.pullRegistries = str(v).split(',').filter(Boolean)),
    for: CONTROL,
  },
  {
    flag: 'webhook',
    type: 'string',
    multiple: true,
    usage: ['[--webhook URL]...', 'every tenant’s lifecycle events POSTed here as they happen, at least once, signed with the secret below'],
    set: (o, v) => void ((o.webhooks ??= { urls: [], secret: '' }).urls = (v as string[]).map(webhookUrl)),
    for: CONTROL,
  },
  // The secret: from the environment, or a file (the flag wins); never on the command line, where ps shows it.
  { env: 'WARREN_WEBHOOK_SECRET', type: 'string', set: (o, v) => void (o.webhooks && (o.webhooks.secret = str(v))), for: CONTROL },
  {
    flag: 'webhook-secret-file',
    type: 'string',
    usage: ['[--webhook-secret-file PATH]', 'the webhooks’ HMAC key, 16 characters or more (or WARREN_WEBHOOK_SECRET)'],
    set: async (o, v) => {
      if (o.webhooks) o.webhooks.secret = (await readFile(str(v), 'utf8')).trim();
    },
    for: CONTROL,
  },
  // No flags: the hardening benchmark's baseline node sets the first, fault-injection tests
  // (test/src/faults.test.ts) the second, the cluster's clock-skew test the third (a node whose
  // clock is that many ms off), and the suite's second pass the fourth.
  { env: 'WARREN_UNHARDENED_BENCH', type: 'string', set: (o, v) => void (o.unhardened = v === '1') },
  { env: 'WARREN_TEST_CRASH_AT', type: 'string', set: (o, v) => void (o.crashAt = str(v) || undefined), for: ALL },
  { env: 'WARREN_TEST_CLOCK_OFFSET_MS', type: 'string', set: (o, v) => void (Number(v) && (o.clock = skewedClock(Number(v)))), for: ['edge'] },
  { env: 'WARREN_EDGE_TRANSPORT', type: 'string', set: (o, v) => void (v === 'http' && (o.edgeTransport = 'http')), for: ['up'] },
];

/** A command's parseArgs options (`warren up` by default), from NODE_OPTIONS. */
export function upFlags(cmd: NodeCommand = 'up'): Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> {
  const out: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> = {};
  for (const n of NODE_OPTIONS) if (n.flag && forCommand(n, cmd)) out[n.flag] = n.multiple ? { type: n.type, multiple: true } : { type: n.type };
  return out;
}

/**
 * A node's options from `warren up`'s parsed flags and the environment, by NODE_OPTIONS: a flag
 * given wins, then its environment variable, then its default.
 */
export async function nodeOptions(values: Record<string, unknown>, env: Record<string, string | undefined>, cmd: NodeCommand = 'up'): Promise<UpOptions> {
  const o = { port: 0, host: '', dataDir: '', imageCacheDir: '', keepSandboxes: false } as UpOptions;
  for (const n of NODE_OPTIONS) {
    if (!forCommand(n, cmd)) continue;
    const v = ((n.flag ? values[n.flag] : undefined) as Value | undefined) ?? (n.env ? env[n.env] : undefined) ?? n.default;
    if (v === undefined || (Array.isArray(v) && v.length === 0)) continue;
    await n.set(o, v);
  }
  return o;
}

/** A command's lines of `warren help` (`warren up` by default), from NODE_OPTIONS. */
export function upUsage(indent = '            ', cmd: NodeCommand = 'up'): string {
  const lines = NODE_OPTIONS.filter((n) => n.usage && forCommand(n, cmd)).map((n) => `${indent}${n.usage![0].padEnd(36)} ${n.usage![1]}`);
  return `  warren ${cmd}\n${lines.join('\n')}`;
}
