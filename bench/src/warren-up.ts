import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
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
 * `cli`: another checkout's built CLI (default: this one's); `env`: more of its environment.
 */
export async function startWarrenUp(
  dataDir: string,
  args: string[] = [],
  opts: { logs?: boolean; cli?: string; env?: Record<string, string> } = {},
): Promise<BenchNode> {
  const key = 'bench-key';
  const images = args.includes('--images') ? [] : ['--images', 'busybox:latest,debian-python:latest'];
  const child = spawn(process.execPath, [opts.cli ?? CLI, 'up', '--port', '0', '--data-dir', dataDir, ...images, ...args], {
    env: { ...process.env, ...opts.env, WARREN_API_KEY: key },
    stdio: ['ignore', 'pipe', opts.logs ? 'inherit' : 'ignore'],
  });
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
    client: new Warren({ url, apiKey: key }),
    pid: child.pid ?? 0,
    stop: () =>
      new Promise((resolve) => {
        child.on('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
