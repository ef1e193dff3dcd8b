import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, type Hash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { WarrenError } from '@warren/api';
import { runFile } from './exec-file.js';
import { BLOCK_BYTES, type BlobSource } from './layer-store.js';
import { parseOciStoreUrl, resolveOciLayer, type OciStoreRef } from './oci-store.js';
import { basicAuth, readCapped, type RegistryCredentials } from './registry.js';

export interface RemoteBlobsOptions {
  /**
   * The blob store: an HTTP(S) base URL serving `<url>/<hex>.erofs`, `.data` and `.blocks` with
   * range requests (never listed), or a registry repository, `oci://host/repo` (`oci+http://` for
   * plain HTTP), holding each layer as an artifact tagged with its hex digest.
   */
  url: string;
  /**
   * Where the view finds each remote layer's `<hex>.blocks` (block digests, checked against the
   * layer digest) and, for a registry store, `<hex>.src` ("SIZE URL" of the data blob).
   */
  sourcesDir: string;
  /** The on-demand view's program (`native/build/warren-blobfs`). */
  binary: string;
  /** Where the on-demand view is mounted. */
  mountDir: string;
  /** The node-local cache of blocks read so far. */
  cacheDir: string;
  /** Bytes the cache may hold; least recently read blocks of files no mount has open go first. */
  cacheMaxBytes: number;
  /** Where the view's pid and log go. */
  runDir: string;
  /** A bearer token the store wants (another Warren node's admin key). */
  key?: string;
  /** A user name and password the store wants (Basic auth; a registry's token service too). */
  credentials?: RegistryCredentials;
  log?: (msg: string) => void;
}

/** Largest metadata image accepted from a blob store. */
const MAX_META = 512 << 20;

/** warren-blobfs's arguments for a view of a blob store (pure). */
export function blobfsArgs(o: Pick<RemoteBlobsOptions, 'url' | 'sourcesDir' | 'mountDir' | 'cacheDir' | 'cacheMaxBytes'>): string[] {
  if (!Number.isSafeInteger(o.cacheMaxBytes) || o.cacheMaxBytes < BLOCK_BYTES) {
    throw new WarrenError('invalid_argument', `the blob cache must hold at least one block (${BLOCK_BYTES} bytes)`);
  }
  const oci = parseOciStoreUrl(o.url);
  if (!oci && !/^https?:\/\/[^\s]+$/.test(o.url)) throw new WarrenError('invalid_argument', `the blob store URL must be http(s):// or oci://: ${o.url}`);
  const url = oci ? oci.client.blobsUrl : o.url;
  return [o.mountDir, '--url', url, '--sources', o.sourcesDir, '--cache', o.cacheDir, '--max-bytes', String(o.cacheMaxBytes)];
}

/** Largest block digest list accepted (32 bytes per MiB: a 512 GiB layer). */
const MAX_BLOCKS = 16 << 20;

/** Hashes what passes through, and fails past `max` bytes. */
function hashCapped(h: Hash, max: number, what: string): Transform {
  let n = 0;
  return new Transform({
    transform(c: Buffer, _e, cb) {
      n += c.length;
      h.update(c);
      cb(n > max ? new WarrenError('invalid_argument', `${what} is too large`) : null, c);
    },
  });
}

let writes = 0;

/** Writes a file whole or not at all (concurrent writers of the same content each use their own temporary). */
async function writeAtomic(path: string, content: string | Buffer): Promise<void> {
  const tmp = `${path}.${process.pid}.${++writes}.tmp`;
  try {
    await writeFile(tmp, content);
    await rename(tmp, path);
  } finally {
    await rm(tmp, { force: true });
  }
}

function isMounted(mountinfo: string, dir: string): boolean {
  return mountinfo.split('\n').some((l) => l.split(' ')[4] === dir);
}

/**
 * Layer data read on demand from an HTTP blob store: a warren-blobfs view of it (FUSE, with a
 * node-local cache of the blocks read), through which EROFS mounts read their data files.
 * Metadata images are fetched whole. The view runs detached, so sandboxes kept across a restart
 * keep reading; the next start finds the mount and uses it.
 */
export class RemoteBlobs implements BlobSource {
  readonly dataDir: string;
  private readonly oci: OciStoreRef | null;

  constructor(private readonly o: RemoteBlobsOptions) {
    this.dataDir = o.mountDir;
    blobfsArgs(o);
    this.oci = parseOciStoreUrl(o.url, o.credentials);
  }

  /** What the store gets as `Authorization`, if anything. */
  private get authorization(): string | undefined {
    if (this.o.credentials) return basicAuth(this.o.credentials);
    return this.o.key ? `Bearer ${this.o.key}` : undefined;
  }

  private get pidFile(): string {
    return join(this.o.runDir, 'blobfs.pid');
  }

  async start(): Promise<void> {
    // A view left by an earlier start (its sandboxes kept) is used as it is, without a call into
    // it; one whose daemon has died is let go first.
    if (isMounted(await readFile('/proc/self/mountinfo', 'utf8'), this.o.mountDir)) {
      const pid = Number((await readFile(this.pidFile, 'utf8').catch(() => '')).trim());
      if (pid > 0 && (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0')[0]?.endsWith('warren-blobfs')) return;
      await runFile('umount', ['-l', this.o.mountDir]).catch(() => undefined);
    }
    await Promise.all([mkdir(this.o.mountDir, { recursive: true }), mkdir(this.o.cacheDir, { recursive: true }), mkdir(this.o.runDir, { recursive: true })]);
    const log = join(this.o.runDir, 'blobfs.log');
    const out = await open(log, 'a');
    // Credentials go in the view's environment, not on its command line (which every host user
    // can read).
    const env = { ...process.env, WARREN_BLOB_AUTH: this.authorization ?? '' };
    let child: ChildProcess;
    try {
      child = spawn(this.o.binary, blobfsArgs(this.o), { detached: true, stdio: ['ignore', 'ignore', out.fd], env });
      await new Promise<void>((resolve, reject) => {
        child.once('error', (e) => reject(new WarrenError('unavailable', `warren-blobfs (for on-demand layers) could not start: ${e.message}`)));
        child.once('spawn', () => resolve());
      });
    } finally {
      await out.close();
    }
    child.unref();
    await writeFile(this.pidFile, String(child.pid));
    for (let i = 0; ; i++) {
      if (isMounted(await readFile('/proc/self/mountinfo', 'utf8'), this.o.mountDir)) break;
      if (child.exitCode !== null || i > 200) {
        throw new WarrenError('unavailable', `warren-blobfs did not mount the blob store ${this.o.url} (see ${log})`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    this.o.log?.(`on-demand layers from ${this.o.url}`);
  }

  /**
   * Fetches a layer's metadata image into `dest` and its block digests beside the metadata,
   * and checks both against the layer digest; the view checks each data block against them.
   */
  async fetchMeta(hex: string, dest: string): Promise<void> {
    const h = createHash('sha256');
    let blocks: Buffer;
    if (this.oci) {
      const {
        meta,
        data,
        blocks: list,
      } = await resolveOciLayer(this.oci, hex).catch((e: unknown) => {
        if (e instanceof WarrenError && e.code === 'not_found') throw new WarrenError('not_found', `the blob store has no layer sha256:${hex}`);
        throw e;
      });
      if (meta.size > MAX_META) throw new WarrenError('invalid_argument', 'a layer metadata image is too large');
      const blob = await this.oci.client.blobStream(meta.digest);
      await pipeline(Readable.from(blob.stream), hashCapped(h, MAX_META, 'a layer metadata image'), createWriteStream(dest));
      blocks = await this.oci.client.blobBytes(list.digest, MAX_BLOCKS);
      // The view reads the data blob by its own digest: where, and how big, goes beside the metadata.
      await writeAtomic(join(this.o.sourcesDir, `${hex}.src`), `${data.size} ${this.oci.client.blobsUrl}${data.digest}\n`);
    } else {
      const meta = await this.get(hex, 'erofs');
      await pipeline(Readable.fromWeb(meta.body as never), hashCapped(h, MAX_META, 'a layer metadata image'), createWriteStream(dest));
      blocks = await readCapped(await this.get(hex, 'blocks'), MAX_BLOCKS, 'a layer block list');
    }
    h.update(blocks);
    if (h.digest('hex') !== hex) throw new WarrenError('invalid_argument', `layer sha256:${hex} from the blob store does not match its digest`);
    await writeAtomic(join(this.o.sourcesDir, `${hex}.blocks`), blocks);
  }

  private async get(hex: string, ext: string): Promise<Response & { body: ReadableStream }> {
    const url = `${this.o.url.replace(/\/+$/, '')}/${hex}.${ext}`;
    const auth = this.authorization;
    const res = await fetch(url, { headers: auth ? { authorization: auth } : {} }).catch((e: unknown) => {
      throw new WarrenError('unavailable', `the blob store cannot be reached: ${String((e as Error).cause ?? e)}`);
    });
    if (res.status === 404) {
      await res.body?.cancel();
      throw new WarrenError('not_found', `the blob store has no layer sha256:${hex} (${ext})`);
    }
    if (!res.ok || !res.body) {
      await res.body?.cancel();
      throw new WarrenError('unavailable', `the blob store answered ${res.status} for ${hex}.${ext}`);
    }
    return res as Response & { body: ReadableStream };
  }

  /** Unmounts the view and stops its daemon (only when no sandbox reads through it any more). */
  async stop(): Promise<void> {
    await runFile('umount', ['-l', this.o.mountDir]).catch(() => undefined);
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
