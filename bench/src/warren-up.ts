import { spawn } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Warren } from '@warren/sdk';

const CLI = fileURLToPath(new URL('../../packages/cli/dist/main.js', import.meta.url));

/** A `warren up` of the benchmarks' own: its URL, admin key, a client, and a stop that waits for it. */
export interface BenchNode {
  url: string;
  key: string;
  client: Warren;
  /** The `warren up` process's id. */
  pid: number;
  stop(): Promise<void>;
}

/**
 * Starts `warren up` on a free port with `dataDir` and extra flags (`--images` default:
 * busybox and debian-python); resolves once it serves. Its stderr goes to ours when `logs`;
 * `cli`: another checkout's built CLI (default: this one's); `env`: more of its environment;
 * `nodeArgs`: Node's own flags for it (a profiler's); `removeDataDir`: the data dir goes with the node;
 * `sdk`: another checkout's built SDK (its `dist/index.js`) for `client` (default: this one's).
 * A benchmark killed any way (SIGKILL too) stops its node: a guard process waits on a pipe from
 * this one, and at its end SIGTERMs `warren up` (which removes its sandboxes) and then, with
 * `removeDataDir`, removes the data dir.
 */
export async function startWarrenUp(
  dataDir: string,
  args: string[] = [],
  opts: { logs?: boolean; cli?: string; env?: Record<string, string>; nodeArgs?: string[]; removeDataDir?: boolean; sdk?: string } = {},
): Promise<BenchNode> {
  const key = 'bench-key';
  // Another build's client has the same API (the benchmarks use its stable calls only).
  const Client = opts.sdk ? ((await import(pathToFileURL(opts.sdk).href)) as { Warren: typeof Warren }).Warren : Warren;
  const images = args.includes('--images') ? [] : ['--images', 'busybox:latest,debian-python:latest'];
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), opts.cli ?? CLI, 'up', '--port', '0', '--data-dir', dataDir, ...images, ...args], {
    env: { ...process.env, ...opts.env, WARREN_API_KEY: key },
    stdio: ['ignore', 'pipe', opts.logs ? 'inherit' : 'ignore'],
  });
  const guard = guardNode(child.pid ?? 0, opts.removeDataDir ? dataDir : null);
  process.once('SIGINT', () => guard.release());
  process.once('SIGTERM', () => guard.release());
  process.once('SIGHUP', () => guard.release());
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /running at (http:\/\/\S+)/.exec(out);
      if (m?.[1]) resolve(m[1]);
    });
    child.on('exit', () => reject(new Error('warren up exited')));
  });
  return {
    url,
    key,
    client: new Client({ url, apiKey: key }),
    pid: child.pid ?? 0,
    stop: async () => {
      guard.cancel();
      await new Promise<void>((resolve) => {
        child.on('exit', () => resolve());
        child.kill('SIGTERM');
      });
      // What the guard would have removed had this process been killed.
      if (opts.removeDataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * A detached shell that reads its stdin (a pipe from this process) and, at its end (this
 * process gone, however it was ended, or `release`), SIGTERMs `pid` and waits for it, then
 * removes `dir` if given. `cancel`: the caller stops the node itself.
 */
function guardNode(pid: number, dir: string | null): { release(): void; cancel(): void } {
  const script = 'read _ || :; kill -TERM "$1" 2>/dev/null; while kill -0 "$1" 2>/dev/null; do sleep 1; done; [ -z "$2" ] || rm -rf "$2"';
  const g = spawn('sh', ['-c', script, 'warren-bench-guard', String(pid), dir ?? ''], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
  g.on('error', () => undefined);
  g.stdin.on('error', () => undefined);
  g.unref();
  return {
    release: () => {
      g.stdin.end();
      // The guard stops the node; this process must outlive nothing of it.
      setTimeout(() => process.exit(130), 100).unref();
    },
    cancel: () => {
      g.kill('SIGKILL');
    },
  };
}
