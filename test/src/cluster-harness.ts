import { after, before } from 'node:test';
import { spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OWNER_PID_FILE } from '@warren/edge';
import { startServer, startTestPostgres, type RunningServer, type TestPostgres } from '@warren/server';
import { Warren } from '@warren/sdk';
import { CLI, IMAGE_CACHE, forceCleanup, spawnEdge, type EdgeProcess } from './harness.js';

// What the cluster suites share: a PostgreSQL of their own, control planes in the test's process
// or as processes of their own, and edges as processes (`warren edge --join`), each with its own
// data dir; all of it killed and removed after the suite, also when it fails.

/** Whether this pass of the suite repeats one the cluster gains nothing from (it always speaks the edge protocol, on PostgreSQL). */
export const rerun = process.env.WARREN_EDGE_TRANSPORT === 'http' || process.env.WARREN_TEST_STORE === 'postgres';

export const TOKEN = 'join-token-for-tests-0123456789';
export const KEY = 'cluster-admin-key';
export const quiet = { info: () => undefined, warn: (m: string, meta?: unknown) => process.env.WARREN_TEST_LOG && console.error(m, meta) };

/** A JSON API answer as the cluster tests read it. */
export interface ApiAnswer {
  status: number;
  json: { error?: { code: string; message: string } } & Record<string, unknown>;
}

/** A control plane on `database` as `server()` starts it. */
export interface ClusterServer {
  s: RunningServer;
  client: Warren;
  database: string;
}

/** The options of `server()`: quick heartbeats and a short down delay unless given. */
export interface ServerOptions {
  database?: string;
  heartbeatMs?: number;
  downAfterMs?: number;
  staleCreateMs?: number;
  logger?: typeof quiet;
  edgeNetworks?: string[];
  requireEdgeTls?: boolean;
  images?: Array<'busybox:latest' | 'debian-python:latest'>;
  fn?: Parameters<typeof startServer>[0]['fn'];
}

/**
 * A cluster suite's parts, with before/after hooks registered where it is called (inside the
 * suite's describe): PostgreSQL started before, everything it made killed and removed after.
 */
export function useCluster(prefix: string) {
  let pg: TestPostgres | undefined;
  let dbs = 0;
  const dirs: string[] = [];
  const edges: EdgeProcess[] = [];
  const servers: RunningServer[] = [];

  before(async () => {
    pg = await startTestPostgres();
  });
  after(async () => {
    for (const e of edges) await e.kill('SIGKILL').catch(() => undefined);
    for (const s of servers) await s.close().catch(() => undefined);
    for (const d of dirs) await forceCleanup(d).catch(() => undefined);
    await pg?.stop();
  });

  async function dataDir(): Promise<string> {
    const d = await mkdtemp(join(tmpdir(), `warren-${prefix}-`));
    // The test runner's sweep for leftovers leaves it alone while this process lives.
    await writeFile(join(d, OWNER_PID_FILE), `${process.pid}\n`);
    dirs.push(d);
    return d;
  }

  /** A control plane on `database` (a new one unless given): quick heartbeats, a short down delay. */
  async function server(o: ServerOptions = {}): Promise<ClusterServer> {
    const database = o.database ?? (await pg!.createDatabase(`${prefix.replace(/\W/g, '')}${++dbs}`));
    const s = await startServer({
      port: 0,
      host: '127.0.0.1',
      dataDir: await dataDir(),
      database,
      imageCacheDir: IMAGE_CACHE,
      images: o.images ?? ['busybox:latest'],
      adminKey: KEY,
      joinToken: TOKEN,
      fn: o.fn,
      heartbeatMs: o.heartbeatMs ?? 200,
      downAfterMs: o.downAfterMs ?? 1500,
      staleCreateMs: o.staleCreateMs,
      edgeNetworks: o.edgeNetworks,
      requireEdgeTls: o.requireEdgeTls,
      logger: o.logger ?? quiet,
    });
    servers.push(s);
    return { s, client: new Warren({ url: s.url, apiKey: KEY }), database };
  }

  /** `warren server` as a process of its own (one a test can kill), on `database`; answers its URL and exit. */
  async function serverProcess(database: string, env: Record<string, string> = {}): Promise<{ url: string; exited: Promise<number | null> }> {
    const child = spawn(
      process.execPath,
      [CLI, 'server', '--port', '0', '--data-dir', await dataDir(), '--database', database, '--images', 'busybox:latest', '--image-cache', IMAGE_CACHE],
      { env: { ...process.env, WARREN_JOIN_TOKEN: TOKEN, WARREN_API_KEY: KEY, ...env }, stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    after(() => void child.kill('SIGKILL'));
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /running at (http:\/\/\S+)/.exec(out);
        if (m?.[1]) resolve(m[1]);
      });
      child.on('exit', () => reject(new Error(`warren server exited early: ${out}`)));
    });
    return { url, exited };
  }

  /** `warren edge --join url` named `name`, in `dir` (a new data dir unless given). */
  async function edge(url: string, name: string, args: string[] = [], dir?: string, env: Record<string, string> = {}): Promise<EdgeProcess> {
    const e = await spawnEdge(url, name, dir ?? (await dataDir()), TOKEN, args, env);
    edges.push(e);
    return e;
  }

  return { dataDir, server, serverProcess, edge, pg: () => pg! };
}

/** A JSON call to the API at `url` with `key` (the admin's unless given). */
export async function api(url: string, method: string, path: string, body?: unknown, key = KEY): Promise<ApiAnswer> {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: (text ? JSON.parse(text) : {}) as ApiAnswer['json'] };
}

/** Each node's state by its id. */
export const nodeStates = async (c: Warren): Promise<Record<string, string>> => Object.fromEntries((await c.nodes()).nodes.map((n) => [n.id, n.state]));
