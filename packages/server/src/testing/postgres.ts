import { spawn, spawnSync } from 'node:child_process';
import { chown, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** A private PostgreSQL server for tests: its own data dir and socket under /tmp, gone on `stop`. */
export interface TestPostgres {
  /** The server's socket dir (a connection string names it as the host). */
  socketDir: string;
  /** A connection string for a database of this name (made by `createDatabase`). */
  url(database: string): string;
  /** Makes a new, empty database; answers its connection string. */
  createDatabase(name: string): Promise<string>;
  /** Stops the server (SIGKILL with `crash`, as a failure would) and removes its files. */
  stop(o?: { crash?: boolean }): Promise<void>;
  /**
   * Stops the server (its connections dropped) and starts it again on the same data, after
   * `downMs` and once `whileDown` (what a test does while the database is away) has finished.
   */
  restart(o?: { downMs?: number; whileDown?: () => Promise<void> }): Promise<void>;
}

/** Where Debian's PostgreSQL binaries are (the newest version installed). */
async function binDir(): Promise<string> {
  const versions = await readdir('/usr/lib/postgresql').catch(() => [] as string[]);
  const newest = versions.filter((v) => existsSync(`/usr/lib/postgresql/${v}/bin/postgres`)).sort((a, b) => Number(b) - Number(a))[0];
  if (!newest) throw new Error('PostgreSQL is not installed (scripts/setup.sh --test installs it)');
  return `/usr/lib/postgresql/${newest}/bin`;
}

/** The uid and gid of the `postgres` user: the server will not run as root. */
async function postgresUser(): Promise<{ uid: number; gid: number }> {
  const line = (await readFile('/etc/passwd', 'utf8')).split('\n').find((l) => l.startsWith('postgres:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  if (uid === undefined || gid === undefined) throw new Error('no postgres user (scripts/setup.sh --test installs PostgreSQL)');
  return { uid: Number(uid), gid: Number(gid) };
}

/**
 * Starts a PostgreSQL server of its own for a test: initdb into a temporary dir, trust
 * authentication, a Unix socket only (no TCP port), fsync off; `settings` (NAME=VALUE) more of
 * its configuration (a benchmark's `shared_preload_libraries=pg_stat_statements`).
 * @example
 * const pgs = await startTestPostgres();
 * const url = await pgs.createDatabase('t1');
 */
export async function startTestPostgres(o: { settings?: string[] } = {}): Promise<TestPostgres> {
  const bin = await binDir();
  const user = process.getuid?.() === 0 ? await postgresUser() : null;
  const dir = await mkdtemp(join(tmpdir(), 'warren-pg-'));
  if (user) await chown(dir, user.uid, user.gid);
  const data = join(dir, 'data');
  const as = user ? { uid: user.uid, gid: user.gid } : {};
  const init = spawnSync(join(bin, 'initdb'), ['-D', data, '-U', 'warren', '-A', 'trust', '--no-sync', '-E', 'UTF8'], { ...as, encoding: 'utf8' });
  if (init.status !== 0) {
    await rm(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${init.stderr}`);
  }
  const args = [
    '-D',
    data,
    '-k',
    dir,
    '-c',
    'listen_addresses=',
    '-c',
    'fsync=off',
    '-c',
    'synchronous_commit=off',
    '-c',
    'full_page_writes=off',
    '-c',
    'max_connections=200',
    ...(o.settings ?? []).flatMap((x) => ['-c', x]),
  ];
  let log = '';
  const url = (database: string): string => `postgresql://warren@${encodeURIComponent(dir)}/${database}`;
  /** Starts the server and resolves once it takes a connection. */
  const launch = async (): Promise<{ server: ReturnType<typeof spawn>; exited: Promise<void> }> => {
    const server = spawn(join(bin, 'postgres'), args, { ...as, stdio: ['ignore', 'ignore', 'pipe'] });
    server.stderr?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
    const exited = new Promise<void>((r) => server.once('exit', () => r()));
    for (let i = 0; ; i++) {
      const c = new pg.Client({ connectionString: url('postgres') });
      try {
        await c.connect();
        await c.end();
        return { server, exited };
      } catch (e) {
        await c.end().catch(() => undefined);
        if (i >= 200 || server.exitCode !== null) {
          server.kill('SIGKILL');
          await exited;
          throw new Error(`PostgreSQL did not start: ${String(e)}\n${log}`);
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  };
  let running = await launch().catch(async (e: unknown) => {
    await rm(dir, { recursive: true, force: true });
    throw e;
  });
  const halt = async (sig: NodeJS.Signals): Promise<void> => {
    if (running.server.exitCode === null && running.server.signalCode === null) running.server.kill(sig);
    await running.exited;
  };
  const stop = async (o: { crash?: boolean } = {}): Promise<void> => {
    await halt(o.crash ? 'SIGKILL' : 'SIGINT');
    await rm(dir, { recursive: true, force: true });
  };
  return {
    socketDir: dir,
    url,
    async createDatabase(name: string): Promise<string> {
      if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a database name: ${name}`);
      const c = new pg.Client({ connectionString: url('postgres') });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE ${name}`);
      } finally {
        await c.end();
      }
      return url(name);
    },
    stop,
    async restart(o = {}) {
      await halt('SIGINT');
      try {
        await Promise.all([o.whileDown?.(), o.downMs ? new Promise((r) => setTimeout(r, o.downMs)) : undefined]);
      } finally {
        running = await launch();
      }
    },
  };
}
