import { execFile, spawn, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { buildBusyboxRootfs } from '@warren/images';
import { pool } from './stats.js';

const run = promisify(execFile);

/** A plain busybox bundle for raw `runc run -d` (no user namespace, no Warren). */
async function rawBundle(dir: string): Promise<void> {
  await mkdir(join(dir, 'rootfs'), { recursive: true });
  await buildBusyboxRootfs(join(dir, 'rootfs'));
  await run('runc', ['spec'], { cwd: dir });
  const spec = JSON.parse((await import('node:fs')).readFileSync(join(dir, 'config.json'), 'utf8')) as {
    process: { terminal: boolean; args: string[] };
    root: { readonly: boolean };
  };
  spec.process.terminal = false;
  spec.process.args = ['sleep', '3600'];
  spec.root.readonly = true;
  await writeFile(join(dir, 'config.json'), JSON.stringify(spec));
}

/** Sustained `runc run -d` creates/s with `concurrency` parallel callers. */
export async function rawRunc(total: number, concurrency: number): Promise<{ perSec: number; latencies: number[] }> {
  const dir = await mkdtemp('/tmp/warren-bench-runc-');
  const ids: string[] = [];
  try {
    await rawBundle(dir);
    const r = await pool(total, concurrency, async (i) => {
      const id = `wbench-${process.pid}-${i}`;
      ids.push(id);
      // A detached container inherits runc's stdio: never wait on a pipe it holds.
      await new Promise<void>((resolve, reject) => {
        const child = spawn('runc', ['run', '-d', '--bundle', dir, id], { stdio: 'ignore' });
        child.on('error', reject);
        child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`runc run exited ${code}`))));
      });
    });
    return { perSec: (total / r.wallMs) * 1000, latencies: r.latencies };
  } finally {
    for (const id of ids) spawnSync('runc', ['delete', '-f', id], { stdio: 'ignore' });
    await rm(dir, { recursive: true, force: true });
  }
}

/** podman with runc (crun fails here), ulimits below this host's hard limits, no network. */
export const PODMAN_FLAGS = ['--runtime', 'runc', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096', '--network', 'none'];

/** Sustained `podman run -d --runtime runc` creates/s, or null when podman is not installed. */
export async function podman(total: number, concurrency: number): Promise<{ perSec: number; latencies: number[] } | null> {
  if (spawnSync('podman', ['--version']).status !== 0) return null;
  const dir = await mkdtemp('/tmp/warren-bench-podman-');
  const image = 'localhost/warren-bench-busybox:latest';
  const names: string[] = [];
  try {
    await buildBusyboxRootfs(dir);
    const tar = spawnSync('tar', ['-C', dir, '-c', '.'], { maxBuffer: 64 * 1024 * 1024 });
    const imp = spawnSync('podman', ['import', '-', image], { input: tar.stdout });
    if (imp.status !== 0) throw new Error(`podman import failed: ${imp.stderr.toString()}`);
    const r = await pool(total, concurrency, async (i) => {
      const name = `wbench-${process.pid}-${i}`;
      names.push(name);
      await run('podman', ['run', '-d', ...PODMAN_FLAGS, '--name', name, image, 'sleep', '3600'], { timeout: 60_000 });
    });
    return { perSec: (total / r.wallMs) * 1000, latencies: r.latencies };
  } finally {
    if (names.length) spawnSync('podman', ['rm', '-f', '-t', '0', ...names], { stdio: 'ignore' });
    spawnSync('podman', ['rmi', '-f', image], { stdio: 'ignore' });
    await rm(dir, { recursive: true, force: true });
  }
}
