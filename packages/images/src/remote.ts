import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { WarrenError } from '@warren/api';
import { runFile } from './exec-file.js';
import type { BlobSource } from './layer-store.js';

export interface RemoteBlobsOptions {
  /** Base URL of the blob store: `<url>/<hex>.erofs` and `<url>/<hex>.data`, ranges supported, directories listed. */
  url: string;
  /** Where the on-demand view is mounted. */
  mountDir: string;
  /** The node-local cache of chunks read so far. */
  cacheDir: string;
  /** Bytes the cache may hold; least recently used files no mount has open go first. */
  cacheMaxBytes: number;
  /** Where rclone's pid and log go. */
  runDir: string;
  /** A bearer token the store wants (another Warren node's admin key). */
  key?: string;
  /** How often the cache is trimmed to its limit (seconds; default 30). */
  trimSeconds?: number;
  log?: (msg: string) => void;
}

/** Largest metadata image accepted from a blob store. */
const MAX_META = 512 << 20;

/** rclone's arguments for a read-only, chunk-cached, on-demand view of an HTTP blob store (pure). */
export function rcloneMountArgs(o: Pick<RemoteBlobsOptions, 'url' | 'mountDir' | 'cacheDir' | 'cacheMaxBytes' | 'trimSeconds'>): string[] {
  return [
    'mount',
    ':http:',
    o.mountDir,
    '--http-url',
    o.url,
    '--read-only',
    '--vfs-cache-mode',
    'full',
    '--cache-dir',
    o.cacheDir,
    '--vfs-cache-max-size',
    `${o.cacheMaxBytes}B`, // rclone reads a bare number as KiB
    '--vfs-cache-max-age',
    '8760h',
    '--vfs-cache-poll-interval',
    `${o.trimSeconds ?? 30}s`,
    // Fetch what is read, in 1 MiB ranges, and nothing ahead of it (measured: 2 MiB of read-ahead,
    // or ranges doubling to 32 MiB, fetched more and started no faster).
    '--vfs-read-chunk-size',
    '1M',
    '--vfs-read-chunk-size-limit',
    '1M',
    '--vfs-read-ahead',
    '0',
    '--buffer-size',
    '0',
    '--no-modtime',
    '--dir-cache-time',
    '2s',
    '--timeout',
    '30s',
    '--contimeout',
    '5s',
    '--low-level-retries',
    '3',
    '--allow-non-empty',
    '--config',
    '/dev/null',
  ];
}

function isMounted(mountinfo: string, dir: string): boolean {
  return mountinfo.split('\n').some((l) => l.split(' ')[4] === dir);
}

/**
 * Layer data read on demand from an HTTP blob store: an `rclone mount` of it (FUSE, with a
 * node-local cache of the ranges read), through which EROFS mounts read their data files.
 * Metadata images are fetched whole. rclone runs detached, so sandboxes kept across a restart
 * keep reading; the next start finds the mount and uses it.
 */
export class RemoteBlobs implements BlobSource {
  readonly dataDir: string;

  constructor(private readonly o: RemoteBlobsOptions) {
    this.dataDir = o.mountDir;
    if (!/^https?:\/\//.test(o.url)) throw new WarrenError('invalid_argument', `the blob store URL must be http(s): ${o.url}`);
  }

  private get pidFile(): string {
    return join(this.o.runDir, 'rclone.pid');
  }

  async start(): Promise<void> {
    // A view left by an earlier start (its sandboxes kept) is used as it is, without a call into
    // it; one whose rclone has died is let go first.
    if (isMounted(await readFile('/proc/self/mountinfo', 'utf8'), this.o.mountDir)) {
      const pid = Number((await readFile(this.pidFile, 'utf8').catch(() => '')).trim());
      if (pid > 0 && (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).startsWith('rclone')) return;
      await runFile('fusermount3', ['-u', '-z', this.o.mountDir]).catch(() => undefined);
    }
    await Promise.all([mkdir(this.o.mountDir, { recursive: true }), mkdir(this.o.cacheDir, { recursive: true }), mkdir(this.o.runDir, { recursive: true })]);
    const log = join(this.o.runDir, 'rclone.log');
    // The key goes in rclone's environment, not on its command line (which every host user can read).
    const env = this.o.key ? { ...process.env, RCLONE_HTTP_HEADERS: `Authorization,Bearer ${this.o.key}` } : process.env;
    const child = spawn('rclone', [...rcloneMountArgs(this.o), '--log-file', log, '--log-level', 'NOTICE'], {
      detached: true,
      stdio: ['ignore', 'ignore', 'ignore'],
      env,
    });
    await new Promise<void>((resolve, reject) => {
      child.once('error', (e) =>
        reject(new WarrenError('unavailable', `rclone (for on-demand layers) could not start: ${e.message}; install the rclone and fuse3 packages`)),
      );
      child.once('spawn', () => resolve());
    });
    child.unref();
    await writeFile(this.pidFile, String(child.pid));
    for (let i = 0; ; i++) {
      if (isMounted(await readFile('/proc/self/mountinfo', 'utf8'), this.o.mountDir)) break;
      if (child.exitCode !== null || i > 200) {
        throw new WarrenError('unavailable', `rclone did not mount the blob store ${this.o.url} (see ${log})`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    this.o.log?.(`on-demand layers from ${this.o.url}`);
  }

  async fetchMeta(hex: string, dest: string): Promise<void> {
    const url = `${this.o.url.replace(/\/+$/, '')}/${hex}.erofs`;
    const res = await fetch(url, { headers: this.o.key ? { authorization: `Bearer ${this.o.key}` } : {} }).catch((e: unknown) => {
      throw new WarrenError('unavailable', `the blob store cannot be reached: ${String((e as Error).cause ?? e)}`);
    });
    if (res.status === 404) throw new WarrenError('not_found', `the blob store has no layer sha256:${hex}`);
    if (!res.ok || !res.body) throw new WarrenError('unavailable', `the blob store answered ${res.status} for ${hex}.erofs`);
    let n = 0;
    const cap = new Transform({
      transform(c: Buffer, _e, cb) {
        n += c.length;
        cb(n > MAX_META ? new WarrenError('invalid_argument', 'a layer metadata image is too large') : null, c);
      },
    });
    await pipeline(Readable.fromWeb(res.body as never), cap, createWriteStream(dest));
  }

  /** Unmounts the view and stops rclone (only when no sandbox reads through it any more). */
  async stop(): Promise<void> {
    await runFile('fusermount3', ['-u', '-z', this.o.mountDir]).catch(() => undefined);
    const pid = Number((await readFile(this.pidFile, 'utf8').catch(() => '')).trim());
    if (pid > 0) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        /* gone */
      }
    }
    await rm(this.pidFile, { force: true });
  }
}
