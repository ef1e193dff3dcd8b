import { mkdtemp, chmod, readFile, writeFile } from 'node:fs/promises';
import pg from 'pg';
import { existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { CgroupV1, OWNER_PID_FILE, SANDBOX_CONTROLLERS, findNamespaceInit, processStartTime, readOwnCgroupParent, sweepDataDir } from '@warren/edge';
import { tmpdir } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { join } from 'node:path';
import { after } from 'node:test';
import { startTestPostgres, startWarren, type RunningWarren, type TestPostgres, type WarrenOptions } from '@warren/server';
import { Warren } from '@warren/sdk';
import type { DefaultImageName } from '@warren/images';

export const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';

// WARREN_TEST_STORE=postgres (the suite's PostgreSQL pass): every node keeps its state in a
// database of its own on a PostgreSQL server this test process starts on first use.
let postgres: Promise<TestPostgres> | undefined;
/** A data dir's database: a node started again on the same data dir finds its state. */
const databases = new Map<string, Promise<string>>();
after(async () => {
  await (await postgres?.catch(() => undefined))?.stop();
});
function testDatabase(dataDir: string, store = process.env.WARREN_TEST_STORE): Promise<string | undefined> {
  if (store !== 'postgres') return Promise.resolve(undefined);
  let url = databases.get(dataDir);
  if (!url) {
    const server = (postgres ??= startTestPostgres());
    const name = `node${databases.size + 1}`;
    url = server.then((p) => p.createDatabase(name));
    databases.set(dataDir, url);
  }
  return url;
}

/** Everything the node's store holds, as bytes: the SQLite file, or every row of its PostgreSQL database as JSON. */
export async function storeContents(t: Pick<TestWarren, 'dataDir' | 'database'>): Promise<Buffer> {
  if (!t.database) return readFile(join(t.dataDir, 'warren.db'));
  const c = new pg.Client({ connectionString: t.database });
  await c.connect();
  try {
    const tables = (await c.query<{ name: string }>("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'")).rows;
    const rows: string[] = [];
    for (const { name } of tables) for (const r of (await c.query<{ j: string }>(`SELECT row_to_json(t)::text AS j FROM "${name}" t`)).rows) rows.push(r.j);
    return Buffer.from(rows.join('\n'));
  } finally {
    await c.end();
  }
}

/**
 * What this process (the server, the edge and the test's clients) holds after full collections:
 * heap and buffers (buffers are freed off the main thread: collected again once that is done).
 */
export async function heldBytes(): Promise<number> {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 20));
  }
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

/** A clock a test moves by hand: starts at the real time, moves only when advanced. */
export interface TestClock {
  now: () => number;
  advance: (ms: number) => void;
}

export function testClock(start = Date.now()): TestClock {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

/**
 * `read()` once it has stopped changing: the same for `quietMs` (polled every 100 ms), or what it
 * is after `ms`. For counts that work in the background (read-ahead's fetches) still moves.
 */
export async function settled(read: () => number, quietMs = 1000, ms = 15_000): Promise<number> {
  let n = read();
  for (let quietSince = Date.now(), deadline = quietSince + ms; Date.now() - quietSince < quietMs && Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 100));
    const now = read();
    if (now !== n) {
      n = now;
      quietSince = Date.now();
    }
  }
  return n;
}

/**
 * Waits for `pred` to hold (polling every 10 ms), failing after `ms`: for what a sweep set going.
 * The default is generous: another test file may be running beside this one (scripts/run-tests.mjs).
 */
export async function until(pred: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`not so after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * A new temporary dir `warren-<prefix>…`, marked as this process's: the sweep for leftovers of
 * another test run on the machine leaves it (its mounts, sandboxes and VMs) alone while this
 * process lives.
 */
export async function ownedTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `warren-${prefix}`));
  await writeFile(join(dir, OWNER_PID_FILE), `${process.pid}\n`);
  return dir;
}

export interface TestWarren {
  warren: RunningWarren;
  client: Warren;
  dataDir: string;
  url: string;
  key: string;
  /** Its PostgreSQL database, if its state is there (else SQLite: `warren.db` in the data dir). */
  database?: string;
  /** Stops Warren and removes its data dir; safe to call twice. */
  close(opts?: { keep?: boolean; removeData?: boolean }): Promise<void>;
}

const quiet = { info: () => undefined, warn: (m: string, meta?: unknown) => process.env.WARREN_TEST_LOG && console.error(m, meta) };

/** A real single-node Warren on a free loopback port with its own data dir. */
export async function startTestWarren(
  opts: {
    images?: DefaultImageName[];
    dataDir?: string;
    adminKey?: string;
    defaultTtlSeconds?: number;
    maxSandboxes?: number;
    runtime?: 'native' | 'runc';
    blobStore?: { url: string; key?: string; username?: string; password?: string; cacheMaxBytes?: number };
    network?: WarrenOptions['network'];
    swap?: WarrenOptions['swap'];
    overcommit?: WarrenOptions['overcommit'];
    memoryFloorMiB?: number;
    /** A memory limit on all the node's sandboxes together (WarrenOptions.sandboxMemoryMiB). */
    sandboxMemoryMiB?: number;
    fn?: WarrenOptions['fn'];
    disk?: WarrenOptions['disk'];
    pullRegistries?: string[];
    maxUploadBytes?: number;
    maxRetainedOutputBytes?: number;
    dataDiskReserveMiB?: number;
    /** The lifecycle's clock (TTLs, idle timeouts, idle pauses): the test advances it, then runs `warren.sweep()`. */
    clock?: TestClock;
    /** The control plane's state in PostgreSQL (WarrenOptions.database; default SQLite in the data dir). */
    database?: string;
    /** Holds a create at a step until the promise resolves (WarrenOptions.holdAt). */
    holdAt?: WarrenOptions['holdAt'];
    /** The full-VM backend (WarrenOptions.vm; default on where it can run). */
    vm?: WarrenOptions['vm'];
    microvm?: WarrenOptions['microvm'];
    /** How the control plane reaches the edge (default: WARREN_EDGE_TRANSPORT, else in-process). */
    edgeTransport?: 'in-process' | 'http';
    /** Where the control plane keeps its state (default: WARREN_TEST_STORE, else SQLite). */
    store?: 'sqlite' | 'postgres';
    /** Lifecycle events POSTed to these (WarrenOptions.webhooks). */
    webhooks?: WarrenOptions['webhooks'];
    /** The port to listen on (default: a free one): a Warren started again where a client knows it. */
    port?: number;
  } = {},
): Promise<TestWarren> {
  const dataDir = opts.dataDir ?? (await ownedTempDir('test-'));
  await chmod(dataDir, 0o711);
  // A sweep for leftovers (another run's test runner) leaves the dir alone while this process lives.
  await writeFile(join(dataDir, OWNER_PID_FILE), `${process.pid}\n`);
  const key = opts.adminKey ?? 'test-admin-key';
  const database = opts.database ?? (await testDatabase(dataDir, opts.store));
  const warren = await startWarren({
    port: opts.port ?? 0,
    host: '127.0.0.1',
    dataDir,
    imageCacheDir: IMAGE_CACHE,
    adminKey: key,
    images: opts.images ?? ['busybox:latest'],
    defaultTtlSeconds: opts.defaultTtlSeconds,
    maxSandboxes: opts.maxSandboxes,
    runtime: opts.runtime,
    blobStore: opts.blobStore,
    network: opts.network,
    swap: opts.swap,
    // No refusing creates for the CPU the sandboxes use: every node on this host puts its
    // sandboxes under the same cgroup parent (this process's), so with a cluster test's edges, or
    // two test files at once, each would count the others' busy sandboxes (TCG guests booting)
    // as its own. That check has its own tests (lifecycle/admission.test.ts, edge.test.ts).
    overcommit: { busy: 0, ...opts.overcommit },
    // Tests run on busy machines: no pausing for memory pressure unless a test asks for it.
    memoryFloorMiB: opts.memoryFloorMiB ?? 0,
    sandboxMemoryMiB: opts.sandboxMemoryMiB,
    fn: opts.fn,
    disk: opts.disk,
    pullRegistries: opts.pullRegistries,
    maxUploadBytes: opts.maxUploadBytes,
    maxRetainedOutputBytes: opts.maxRetainedOutputBytes,
    dataDiskReserveMiB: opts.dataDiskReserveMiB,
    clock: opts.clock?.now,
    holdAt: opts.holdAt,
    vm: opts.vm,
    microvm: opts.microvm,
    database,
    webhooks: opts.webhooks,
    // A pass of the API's tests on the microVM backend (scripts/run-tests.mjs) makes it the default.
    defaultBackend: process.env.WARREN_TEST_BACKEND === 'microvm' ? 'microvm' : undefined,
    edgeTransport: (opts.edgeTransport ?? process.env.WARREN_EDGE_TRANSPORT) === 'http' ? 'http' : undefined,
    logger: quiet,
  });
  const client = new Warren({ url: warren.url, apiKey: key });
  let closed = false;
  return {
    warren,
    client,
    dataDir,
    url: warren.url,
    key,
    database,
    async close(o = {}) {
      if (closed) return;
      closed = true;
      try {
        await warren.close({ keep: o.keep });
      } finally {
        if (o.removeData ?? !o.keep) await forceCleanup(dataDir);
      }
    },
  };
}

/**
 * Skips a test in the microVM pass (which is for what crosses the init protocol): for tests of
 * the edge's or the server's own logic, which the container pass already shows.
 */
export const notOnMicrovm = (why: string): { skip: string | false } => ({
  skip: process.env.WARREN_TEST_BACKEND === 'microvm' ? `the container pass shows it: ${why}` : false,
});

/** Raw HTTP for tests of the wire itself. */
export async function http(
  t: TestWarren,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: unknown; text: string }> {
  const res = await fetch(t.url + path, {
    method,
    headers: { authorization: `Bearer ${t.key}`, ...(body !== undefined && !Buffer.isBuffer(body) ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, json, text };
}

export function errorCode(r: { json: unknown }): string | undefined {
  const j = r.json as { error?: { code?: string } } | null;
  return j?.error?.code;
}

/**
 * Last-resort cleanup for a data dir whose Warren could not close (a failed start, a crashed
 * test): kills its sandboxes (runc containers and native inits) and removes their cgroups, unmounts
 * everything below it, removes it.
 */
export async function forceCleanup(dataDir: string): Promise<void> {
  await sweepDataDir(dataDir, { remove: true });
}

/** The host pid and start time of a sandbox's init: the PID 1 among its cgroup's processes. */
export async function initOf(id: string): Promise<{ pid: number; startTime: number } | null> {
  const pid = await findNamespaceInit(await new CgroupV1().procs('pids', `${readOwnCgroupParent()}/${id}`));
  const startTime = pid === null ? null : await processStartTime(pid);
  return pid === null || startTime === null ? null : { pid, startTime };
}

/** Whether anything of a sandbox is left on the host: a runc container, a cgroup, a live init. */
export function hostLeftovers(id: string): string[] {
  const left: string[] = [];
  if (execFileSync('runc', ['list', '-q']).toString().split('\n').includes(id)) left.push('runc container');
  for (const c of SANDBOX_CONTROLLERS) if (existsSync(new CgroupV1().dir(c, `${readOwnCgroupParent()}/${id}`))) left.push(`${c} cgroup`);
  return left;
}

export const CLI = new URL('../../packages/cli/dist/main.js', import.meta.url).pathname;

export interface UpProcess {
  url: string;
  /** Sends a signal and waits for the process to exit. */
  kill(sig: NodeJS.Signals): Promise<void>;
  /** Sends a signal to its whole process group, as Ctrl-C at a terminal does, and waits. */
  interrupt(): Promise<void>;
  exited: Promise<number | null>;
  /** What it printed so far. */
  stdout(): string;
}

/** Runs `warren up` as its own process and resolves with its URL once it serves. */
export async function spawnUp(args: string[], env: NodeJS.ProcessEnv): Promise<UpProcess> {
  const { spawn } = await import('node:child_process');
  // --cpu-busy 0: as startTestWarren's nodes (see there).
  const child = spawn(process.execPath, [CLI, 'up', '--port', '0', '--cpu-busy', '0', ...args], { env, stdio: ['ignore', 'pipe', 'ignore'], detached: true });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /running at (http:\/\/\S+)/.exec(out);
      if (m?.[1]) resolve(m[1]);
    });
    child.on('exit', () => reject(new Error(`warren up exited early: ${out}`)));
  });
  return {
    url,
    exited,
    stdout: () => out,
    kill: async (sig) => {
      child.kill(sig);
      await exited;
    },
    interrupt: async () => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, 'SIGINT');
      await exited;
    },
  };
}

export interface EdgeProcess {
  /** Where its edge protocol listens. */
  address: string;
  pid: number;
  /** Sends a signal; with SIGKILL or SIGTERM, waits for the process to exit. */
  kill(sig: NodeJS.Signals): Promise<void>;
  exited: Promise<number | null>;
}

/**
 * Runs `warren edge --join URL --name NAME` as its own process and resolves once it joined;
 * rejects with what it printed if it exits first.
 */
export async function spawnEdge(
  join: string,
  name: string,
  dataDir: string,
  token: string,
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<EdgeProcess> {
  const { spawn } = await import('node:child_process');
  const child = spawn(
    process.execPath,
    [CLI, 'edge', '--join', join, '--name', name, '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--images', 'busybox:latest', '--no-zram-swap', ...args],
    { env: { ...process.env, WARREN_JOIN_TOKEN: token, WARREN_API_KEY: '', ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let out = '';
  child.stderr.on('data', (d: Buffer) => {
    out += d.toString();
    if (out.length > 1 << 20) out = out.slice(-(1 << 19));
  });
  const address = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /its edge protocol is at (\S+)/.exec(out);
      if (m?.[1]) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`warren edge exited (${code}) before it joined: ${out.slice(-2000)}`)));
  });
  return {
    address,
    pid: child.pid ?? 0,
    exited,
    kill: async (sig) => {
      if (child.exitCode === null && child.signalCode === null) child.kill(sig);
      if (sig === 'SIGKILL' || sig === 'SIGTERM') await exited;
    },
  };
}

/** A process's (or thread's) scheduling policy, from /proc/PID/stat (field 41: 0 SCHED_OTHER, 5 SCHED_IDLE). */
export async function policyOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[38]);
}
