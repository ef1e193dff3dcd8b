import { mkdtemp, readdir, rm, chmod } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { CgroupV1, SANDBOX_CONTROLLERS, findNamespaceInit, nodeTag, processStartTime, readOwnCgroupParent } from '@warren/edge';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startWarren, type RunningWarren, type WarrenOptions } from '@warren/server';
import { Warren } from '@warren/sdk';
import type { DefaultImageName } from '@warren/images';

export const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';

export interface TestWarren {
  warren: RunningWarren;
  client: Warren;
  dataDir: string;
  url: string;
  key: string;
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
    fn?: WarrenOptions['fn'];
    disk?: WarrenOptions['disk'];
    pullRegistries?: string[];
    maxUploadBytes?: number;
    maxRetainedOutputBytes?: number;
    dataDiskReserveMiB?: number;
  } = {},
): Promise<TestWarren> {
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'warren-test-')));
  await chmod(dataDir, 0o711);
  const key = opts.adminKey ?? 'test-admin-key';
  const warren = await startWarren({
    port: 0,
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
    overcommit: opts.overcommit,
    // Tests run on busy machines: no pausing for memory pressure unless a test asks for it.
    memoryFloorMiB: opts.memoryFloorMiB ?? 0,
    fn: opts.fn,
    disk: opts.disk,
    pullRegistries: opts.pullRegistries,
    maxUploadBytes: opts.maxUploadBytes,
    maxRetainedOutputBytes: opts.maxRetainedOutputBytes,
    dataDiskReserveMiB: opts.dataDiskReserveMiB,
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
  const { readFile } = await import('node:fs/promises');
  let list: Array<{ id: string; bundle: string; pid: number }> = [];
  try {
    list = JSON.parse(execFileSync('runc', ['list', '-f', 'json']).toString() || '[]') as typeof list;
  } catch {
    list = [];
  }
  for (const c of list ?? []) {
    if (!c.bundle.startsWith(dataDir + '/')) continue;
    try {
      execFileSync('runc', ['resume', c.id], { stdio: 'ignore' });
    } catch {
      /* not paused */
    }
    try {
      execFileSync('runc', ['delete', '-f', c.id], { stdio: 'ignore' });
    } catch {
      /* already gone */
    }
  }
  // Sandboxes of either runtime: found by their cgroups.
  const cgroups = new CgroupV1();
  const parent = readOwnCgroupParent();
  for (const id of await readdir(join(dataDir, 'sandboxes')).catch(() => [] as string[])) {
    await cgroups.setFrozen(`${parent}/${id}`, false, 500).catch(() => undefined);
    for (const pid of await cgroups.procs('pids', `${parent}/${id}`)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    for (let i = 0; i < 500 && (await cgroups.procs('pids', `${parent}/${id}`)).length > 0; i++) await new Promise((r) => setTimeout(r, 2));
    await cgroups.remove(`${parent}/${id}`, SANDBOX_CONTROLLERS, 2000).catch(() => undefined);
  }
  // An on-demand blob view's daemon.
  const blobfs = Number((await readFile(join(dataDir, 'cache', 'blobfs.pid'), 'utf8').catch(() => '')).trim());
  if (blobfs > 0 && (await readFile(`/proc/${blobfs}/cmdline`, 'utf8').catch(() => '')).includes('warren-blobfs')) {
    try {
      process.kill(blobfs, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  // Its sandbox network: the node's nftables table (its veths went with the namespaces).
  try {
    execFileSync('nft', ['delete', 'table', 'inet', `warren_${nodeTag(dataDir)}`], { stdio: 'ignore' });
  } catch {
    /* none */
  }
  const mounts = (await readFile('/proc/self/mounts', 'utf8'))
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m.startsWith(dataDir + '/'))
    .reverse();
  for (const m of mounts) {
    try {
      execFileSync('umount', ['-l', m], { stdio: 'ignore' });
    } catch {
      /* already unmounted */
    }
  }
  await rm(dataDir, { recursive: true, force: true });
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
}

/** Runs `warren up` as its own process and resolves with its URL once it serves. */
export async function spawnUp(args: string[], env: NodeJS.ProcessEnv): Promise<UpProcess> {
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, [CLI, 'up', '--port', '0', ...args], { env, stdio: ['ignore', 'pipe', 'ignore'], detached: true });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
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
