import { chmod, copyFile, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import {
  CgroupV1,
  ContainerBackend,
  Edge,
  localEdgeApi,
  remoteEdgeApi,
  listenEdgeApi,
  type EdgeApi,
  HostHelper,
  SandboxNetwork,
  openSandboxDisk,
  checkRoom,
  dataDiskRoom,
  defaultReserveBytes,
  readOwnCgroupParent,
  openNodeSwap,
  type ContainerRuntime,
} from '@warren/edge';
import { WarrenError, parseNetworkRule } from '@warren/api';
import {
  DEFAULT_ID_MAP,
  HOST_BASH,
  HOST_BUSYBOX,
  ImageCatalogue,
  LayerStore,
  RemoteBlobs,
  installDefaultImages,
  prepareDefaultImages,
  type DefaultImageName,
} from '@warren/images';
import { SqliteStore } from './store/sqlite-store.js';
import { PgStore } from './store/pg-store.js';
import type { Store } from './store/store.js';
import { Auth } from './services/auth.js';
import { SandboxService } from './services/sandboxes.js';
import { ImageService } from './services/images.js';
import { PoolService } from './services/pools.js';
import { FnService, type FnOptions } from './services/fn.js';
import { CommandService } from './services/commands.js';
import { FileService } from './services/files.js';
import { NodeService } from './services/nodes.js';
import { EdgeEventReader } from './services/edge-events.js';
import { AuditLog } from './services/audit.js';
import { createApp } from './http/app.js';

export interface Logger {
  info(msg: string, meta?: unknown): void;
  warn(msg: string, meta?: unknown): void;
}

export interface WarrenOptions {
  port: number;
  host: string;
  dataDir: string;
  /**
   * The control plane's state in PostgreSQL (`postgres://` or `postgresql://`); default: SQLite
   * in the data dir (`warren.db`). Several nodes may share one database (each with its own
   * `nodeId`).
   */
  database?: string;
  /** Where default images are built once and kept across data dirs. */
  imageCacheDir: string;
  adminKey?: string;
  nodeId?: string;
  nativeDir?: string;
  runcPath?: string;
  runcRoot?: string;
  /** How sandbox inits start: `native` (default) or `runc`. */
  runtime?: ContainerRuntime;
  images?: DefaultImageName[];
  defaultTtlSeconds?: number;
  maxSandboxes?: number;
  /**
   * A blob store to read layer data from on demand: `http(s)://…` serving `<url>/<hex>.erofs|.data`
   * with range requests (never listed), or a registry repository `oci://host/repo` (`oci+http://`
   * for plain HTTP): layers this node lacks are mounted without downloading them.
   */
  blobStore?: { url: string; key?: string; username?: string; password?: string; cacheMaxBytes?: number };
  /**
   * Sandbox networking (default on): `false` gives every sandbox loopback only. `hosts` maps
   * names to addresses for the egress proxy (before DNS; the operator's word, so internal
   * addresses are allowed there); `subnet` is the sandboxes' /18 (default: a free one in
   * 10.200.0.0/13); `poolSize` network namespaces are kept ready.
   */
  network?:
    | false
    | {
        hosts?: Record<string, string>;
        subnet?: string;
        poolSize?: number;
        maxConnectionsPerSandbox?: number;
        newConnectionsPerSecond?: number;
        dnsQueriesPerSecond?: number;
      };
  /**
   * What the node promises. Memory requests are admitted up to its memory × `memory` (default
   * 1.5); a paused sandbox counts only what stays resident. CPU limits are caps, not
   * reservations: a create is refused when the node's sandboxes have used more than its CPUs ×
   * `busy` over the last ~10 s (default 0.9; 0: no such check), and CPU limits of running
   * sandboxes may add up to its CPUs × `cpu` (default 64, a safety bound). `cpus`/`memoryMiB`
   * replace what the machine has (for tests and shared hosts).
   */
  overcommit?: { cpu?: number; busy?: number; memory?: number; cpus?: number; memoryMiB?: number };
  /** Available memory the node keeps by pausing its longest-idle sandboxes (MiB; 0: off). */
  memoryFloorMiB?: number;
  /**
   * Compressed swap in RAM (zram) for paused sandboxes' memory, set up at start, removed at stop.
   * Default: half of the machine's memory, unless the host has swap already; `false`: none.
   */
  swap?: false | { zramMiB?: number };
  /**
   * Sandboxes' writable layers on a btrfs file system of their own with per-sandbox quotas
   * (default on): `sizeGiB` for its sparse image (default 80 % of the data dir's free space),
   * `defaultMiB` for a sandbox that asks for no limit (default 10 GiB). `false`: plain
   * directories, and a create asking for diskMiB is refused.
   */
  disk?: false | { sizeGiB?: number; defaultMiB?: number };
  /**
   * Space on the data dir's disk kept for Warren's own state (the store, layers): the sandboxes'
   * image is sized to leave it, and imports, uploads, pulls and commits that would reach into it
   * answer resource_exhausted. Default: 5 % of the disk, 256 MiB to 2 GiB.
   */
  dataDiskReserveMiB?: number;
  /**
   * For the hardening benchmark's baseline only (bench/src/hardening.ts): sandboxes without
   * seccomp, masked paths, disk quotas or id ranges of their own. Never for a node anyone uses.
   */
  unhardened?: boolean;
  /** FnCall workers: warm pools, limits (see FnOptions). */
  fn?: Omit<FnOptions, 'logger'>;
  /** Largest image archive or layer upload, in bytes (default 64 GiB). */
  maxUploadBytes?: number;
  /** Command output the node holds for all sandboxes together (default an eighth of memory, at most 4 GiB). */
  maxRetainedOutputBytes?: number;
  /** Registries (`host[:port]`) non-admin keys may pull from (default none: only admins pull). */
  pullRegistries?: string[];
  /**
   * For fault-injection tests only: the process kills itself (SIGKILL) when it reaches this
   * step (`exec:stored`, `exec:started`, `delete:stored`, `network:stored`).
   */
  crashAt?: string;
  /**
   * For tests only: a create waits at `create:stored` (its record written, nothing started on
   * the edge) until the promise this answers for the step resolves (undefined: it goes on).
   */
  holdAt?: (step: string) => Promise<void> | undefined;
  logger: Logger;
  /**
   * The lifecycle's clock (default Date.now): what TTLs, idle timeouts and pause-after-idle are
   * measured by. Tests pass their own and advance it, then run {@link RunningWarren.sweep}.
   */
  clock?: () => number;
  /**
   * How the control plane reaches this node's edge: `in-process` (default) or `http`, the
   * network transport on a Unix socket of the data dir (what a control plane on another
   * machine uses; the test suite runs once on each).
   */
  edgeTransport?: 'in-process' | 'http';
}

export interface RunningWarren {
  url: string;
  adminKey: string;
  adminKeyFile: string | null;
  /** Stops serving; `keep` leaves sandboxes running for the next start to take back. */
  close(opts?: { keep?: boolean }): Promise<void>;
  /** Runs the edge's sweep now (TTLs, idle timeouts, idle pauses), as its timer does every second. */
  sweep(): Promise<void>;
}

export const VERSION = '0.1.0';

/**
 * Puts a helper into the platform dir. Running sandboxes execute the old file, so it is never
 * written in place (ETXTBSY): an unchanged file is left alone, a changed one renamed over.
 */
async function installPlatformFile(src: string, dest: string): Promise<void> {
  const [a, b] = await Promise.all([readFile(src), readFile(dest).catch(() => null)]);
  if (b && a.equals(b)) return;
  const tmp = `${dest}.${process.pid}.tmp`;
  await copyFile(src, tmp);
  await chmod(tmp, 0o755);
  await rename(tmp, dest);
}

async function openNetwork(
  host: HostHelper,
  dataDir: string,
  o: Exclude<WarrenOptions['network'], false | undefined>,
  logger: Logger,
): Promise<SandboxNetwork> {
  let block;
  if (o.subnet) {
    const r = parseNetworkRule(o.subnet);
    if (r.kind !== 'cidr' || r.prefix !== 18) throw new Error(`network subnet "${o.subnet}" must be an IPv4 /18`);
    block = { base: r.base, prefix: r.prefix };
  }
  const net = new SandboxNetwork({
    host,
    dataDir,
    runDir: join(dataDir, 'run'),
    block,
    hosts: o.hosts,
    poolSize: o.poolSize,
    maxConnectionsPerSandbox: o.maxConnectionsPerSandbox,
    newConnectionsPerSecond: o.newConnectionsPerSecond,
    dnsQueriesPerSecond: o.dnsQueriesPerSecond,
    logger,
  });
  await net.open();
  return net;
}

/**
 * How the control plane reaches the edge: the edge itself (in-process), or, with
 * `edgeTransport: 'http'`, a client of the edge served on a Unix socket of the data dir, as a
 * control plane elsewhere would (same process; the suite runs on both).
 */
async function linkEdge(edge: Edge, o: WarrenOptions): Promise<{ api: EdgeApi; close(): Promise<void> }> {
  const local = localEdgeApi(edge);
  if (o.edgeTransport !== 'http') return { api: local, close: async () => undefined };
  const token = randomBytes(24).toString('base64url');
  const socketPath = join(o.dataDir, 'run', 'edge.sock');
  await mkdir(join(o.dataDir, 'run'), { recursive: true });
  const served = await listenEdgeApi(local, socketPath, { token, logger: o.logger });
  const api = remoteEdgeApi({ socketPath, token });
  return {
    api,
    close: async () => {
      api.disconnect();
      await served.close();
    },
  };
}

/** A PostgreSQL store at `url` (the error names the database without its password). */
async function openDatabase(url: string): Promise<Store> {
  let where: URL;
  try {
    where = new URL(url);
  } catch {
    throw new WarrenError('invalid_argument', 'the database is not a URL: postgres://user@host/database');
  }
  if (where.protocol !== 'postgres:' && where.protocol !== 'postgresql:')
    throw new WarrenError('invalid_argument', `the database must be PostgreSQL (postgres://…), not ${where.protocol.replace(/:$/, '')}`);
  where.password = '';
  try {
    return await PgStore.open(url);
  } catch (e) {
    throw new WarrenError('unavailable', `cannot open the database ${where.toString()}: ${e instanceof Error ? e.message : String(e)}`, {}, { cause: e });
  }
}

const defaultNativeDir = (): string => fileURLToPath(new URL('../../../native/build/', import.meta.url));

/**
 * Starts the control plane and one edge in this process: its state in SQLite under `dataDir` (or
 * in PostgreSQL: `database`), the layer store under `dataDir`, default images from the cache,
 * sandboxes from an earlier run taken back.
 * @example
 * const w = await startWarren({ port: 7070, host: '127.0.0.1', dataDir: '/var/lib/warren', imageCacheDir: '/var/cache/warren/images', logger: console });
 */
export async function startWarren(o: WarrenOptions): Promise<RunningWarren> {
  const nativeDir = o.nativeDir ?? defaultNativeDir();
  const nodeId = o.nodeId ?? 'node-1';
  await mkdir(o.dataDir, { recursive: true });
  // Sandbox roots and the platform mount live below the data dir: root inside a sandbox (an
  // unprivileged host uid) must be able to traverse it, but not list it.
  await chmod(o.dataDir, 0o711);
  const platformDir = join(o.dataDir, 'platform');
  await mkdir(platformDir, { recursive: true, mode: 0o755 });
  await installPlatformFile(join(nativeDir, 'warren-init'), join(platformDir, 'warren-init'));
  await installPlatformFile(HOST_BUSYBOX, join(platformDir, 'busybox'));
  await installPlatformFile(HOST_BASH, join(platformDir, 'bash'));
  await installPlatformFile(join(nativeDir, 'libwarren-fn.so'), join(platformDir, 'libwarren-fn.so'));
  await installPlatformFile(join(nativeDir, 'fn-zygote.py'), join(platformDir, 'fn-zygote.py'));

  const layers = new LayerStore(join(o.dataDir, 'layers'));
  await layers.open();
  // The control plane's state, the image and layer catalogue included (over this node's blobs).
  const store = o.database ? await openDatabase(o.database) : new SqliteStore(join(o.dataDir, 'warren.db'));
  const catalogue = new ImageCatalogue(layers, store);
  const adopted = await catalogue.adoptIndexFiles();
  if (adopted.images || adopted.layers) o.logger.info('took the image and layer index files into the store', adopted);
  const remote = o.blobStore
    ? new RemoteBlobs({
        url: o.blobStore.url,
        key: o.blobStore.key,
        credentials: o.blobStore.username !== undefined ? { username: o.blobStore.username, password: o.blobStore.password ?? '' } : undefined,
        binary: join(nativeDir, 'warren-blobfs'),
        sourcesDir: join(o.dataDir, 'layers', 'blobs'),
        mountDir: join(o.dataDir, 'mnt', 'remote'),
        cacheDir: join(o.dataDir, 'cache', 'blobs'),
        cacheMaxBytes: o.blobStore.cacheMaxBytes ?? 20 * 2 ** 30,
        runDir: join(o.dataDir, 'cache'),
        log: (m) => o.logger.info(m),
      })
    : null;
  if (remote) {
    await remote.start();
    layers.remote = remote;
  }
  const prepared = await prepareDefaultImages({ cacheDir: o.imageCacheDir, only: o.images, log: (m) => o.logger.info(m) });
  await installDefaultImages(catalogue, prepared);

  let adminKey = o.adminKey;
  let adminKeyFile: string | null = null;
  if (!adminKey) {
    adminKeyFile = join(o.dataDir, 'admin.key');
    adminKey = (await readFile(adminKeyFile, 'utf8').catch(() => '')).trim();
    if (!adminKey) {
      adminKey = `wk_${randomBytes(24).toString('base64url')}`;
      await writeFile(adminKeyFile, adminKey + '\n', { mode: 0o600 });
    }
  }

  const mounts = new HostHelper(join(nativeDir, 'warren-hostd'), (why) =>
    o.logger.warn('warren-hostd died; a new one took its place (calls it had not answered failed)', { error: String(why) }),
  );
  const diskReserve = o.dataDiskReserveMiB !== undefined ? o.dataDiskReserveMiB * 2 ** 20 : defaultReserveBytes((await dataDiskRoom(o.dataDir)).sizeBytes);
  if (o.unhardened) o.logger.warn('UNHARDENED node (benchmark baseline): sandboxes run without seccomp, masked paths, disk quotas or id ranges of their own');
  const disk =
    o.disk === false || o.unhardened
      ? null
      : await openSandboxDisk(o.dataDir, { sizeGiB: o.disk?.sizeGiB, reserveBytes: diskReserve, log: (m, meta) => o.logger.info(m, meta) });
  if (disk?.quotas && o.disk && o.disk.defaultMiB !== undefined && o.disk.defaultMiB > disk.sizeMiB / 2)
    throw new Error(`the default sandbox disk (${o.disk.defaultMiB} MiB) is more than half of the sandboxes’ file system (${disk.sizeMiB} MiB)`);
  const backend = new ContainerBackend({
    dataDir: o.dataDir,
    platformDir,
    runcPath: o.runcPath ?? 'runc',
    runcRoot: o.runcRoot ?? '/run/runc',
    cgroupParent: readOwnCgroupParent(),
    idMap: DEFAULT_ID_MAP,
    store: layers,
    mounts,
    spawner: mounts,
    cgroups: new CgroupV1(),
    runtime: o.runtime,
    pageoutPath: join(nativeDir, 'warren-pageout'),
    diskQuotas: disk?.quotas ?? false,
    unhardened: o.unhardened,
    logger: o.logger,
  });
  await backend.open();
  const network = o.network === false ? null : await openNetwork(mounts, o.dataDir, o.network ?? {}, o.logger);
  const ncpu = o.overcommit?.cpus ?? cpus().length;
  const memMiB = o.overcommit?.memoryMiB ?? Math.floor(totalmem() / 1024 / 1024);
  const crashAt = o.crashAt;
  const failpoint = crashAt
    ? (step: string): void => {
        if (step === crashAt) process.kill(process.pid, 'SIGKILL');
      }
    : undefined;
  const edge = new Edge({
    nodeId,
    backends: [backend],
    now: o.clock,
    capacity: {
      cpu: ncpu * (o.overcommit?.cpu ?? 64),
      busyCpu: o.overcommit?.busy === 0 ? undefined : ncpu * (o.overcommit?.busy ?? 0.9),
      memoryMiB: Math.floor(memMiB * (o.overcommit?.memory ?? 1.5)),
      sandboxes: o.maxSandboxes ?? 4096,
      maxCpuPerSandbox: ncpu,
      maxMemoryMiBPerSandbox: memMiB,
      // Half the sandboxes' file system: one sandbox filling its quota leaves room for the rest.
      maxDiskMiBPerSandbox: disk?.quotas ? Math.floor(disk.sizeMiB / 2) : undefined,
    },
    memoryFloorMiB: o.memoryFloorMiB,
    maxRetainedOutputBytes: o.maxRetainedOutputBytes,
    failpoint,
    logger: o.logger,
    network: network ?? undefined,
  });
  // The control plane reaches the edge only through its API: in this process, or over HTTP.
  const link = await linkEdge(edge, o);
  const edgeApi = link.api;
  const node = await edgeApi.info();
  const service = new SandboxService(store, edgeApi, node, catalogue, {
    nodeId,
    failpoint,
    holdAt: o.holdAt,
    defaultTtlSeconds: o.defaultTtlSeconds ?? 3600,
    defaults: {
      cpu: 1,
      memoryMiB: 512,
      pids: 1024,
      // 10 GiB unless set, and never more than a quarter of the sandboxes' file system.
      diskMiB: disk?.quotas ? ((o.disk ? o.disk.defaultMiB : undefined) ?? Math.min(10240, Math.floor(disk.sizeMiB / 4))) : null,
    },
    logger: o.logger,
    now: o.clock,
  });
  const pools = new PoolService(store, edgeApi, service, { logger: o.logger });
  service.pools = pools;
  const sandboxes = service;
  const fn = new FnService(edgeApi, node.capacity, catalogue, {
    ...o.fn,
    logger: o.logger,
    quota: { usage: (tenant) => store.tenantUsage(tenant), fit: (tenant, quota, r, stored) => sandboxes.fitQuota(tenant, quota, r, 1, stored) },
  });
  service.fn = fn;
  const events = new EdgeEventReader(
    edgeApi,
    (ev) => {
      if (ev.type === 'state') return service.stateChanged(ev.id, ev);
      if (ev.type === 'expired') return service.expire(ev.id, ev.reason);
      if (fn.owns(ev.id)) return fn.died(ev.id);
      return service.died(ev.id);
    },
    o.logger,
  );
  const commands = new CommandService(store, edgeApi, service, { failpoint });
  const files = new FileService(edgeApi, service, node.maxFileBytes);
  const recovered = await service.recover();
  if (recovered.adopted || recovered.failed) o.logger.info('recovered sandboxes', recovered);
  await network?.sweep();
  edge.start();
  await pools.start();
  await fn.start();
  const flush = setInterval(() => void service.flushActivity().catch(() => undefined), 5000);
  flush.unref();

  const images = new ImageService(catalogue, edgeApi, {
    idMap: DEFAULT_ID_MAP,
    ops: mounts,
    maxUploadBytes: o.maxUploadBytes ?? 64 * 2 ** 30,
    pullRegistries: o.pullRegistries,
    logger: o.logger,
    failpoint,
    checkDisk: async (what) => checkRoom(await dataDiskRoom(o.dataDir), diskReserve, what),
  });
  // A commit, import or upload cut off by a crash leaves a whole layer that nothing names: it goes
  // now that the sandboxes that came back (and the layers they use) are known.
  const orphans = await images.collectGarbage().catch((e: unknown) => {
    o.logger.warn('garbage collection at start failed', { error: String(e) });
    return [];
  });
  if (orphans.length) o.logger.info('removed layers nothing names', { layers: orphans });
  const auth = new Auth(store, adminKey);
  const audit = new AuditLog(store, (e, entries) => o.logger.warn('audit entries were not written', { entries, error: String(e) }));
  let url = '';
  const nodes = new NodeService(edgeApi, node, () => url);
  const server = createApp({ version: VERSION, auth, sandboxes: service, commands, files, nodes, catalogue, images, pools, fn, audit, logger: o.logger });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  // Last, when nothing after can fail: the swap is the host's, and must not outlive a failed start.
  const zram =
    o.swap === false
      ? null
      : await openNodeSwap({
          stateFile: join(o.dataDir, 'zram.device'),
          sizeMiB: o.swap?.zramMiB,
          totalMemMiB: Math.floor(totalmem() / 2 ** 20),
          log: o.logger,
        }).catch(async (e: unknown) => {
          server.close();
          await events.stop();
          await edgeApi.close({ keep: true });
          await link.close();
          await mounts.close();
          await store.close();
          throw e;
        });
  if (zram) o.logger.info('zram swap on', { device: zram.device, sizeMiB: zram.sizeMiB });
  const addr = server.address() as AddressInfo;
  url = `http://${o.host.includes(':') ? `[${o.host}]` : o.host}:${addr.port}`;

  let closing: Promise<void> | null = null;
  return {
    url,
    adminKey,
    adminKeyFile,
    sweep: async () => {
      const { lastEventSeq } = await edgeApi.sweep();
      await events.reached(lastEventSeq);
    },
    close(opts = {}) {
      closing ??= (async () => {
        clearInterval(flush);
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
        pools.close();
        await fn.close();
        await service.flushActivity().catch(() => undefined);
        await audit.close();
        await events.stop();
        const ids = (await edgeApi.sandboxes()).map((x) => x.id);
        await edgeApi.close({ keep: opts.keep ?? false });
        await link.close();
        if (!opts.keep) for (const id of ids) await store.updateSandbox(id, { state: 'stopped' });
        // Kept sandboxes read their layers through it: it stays for the next start.
        if (remote && (!opts.keep || ids.length === 0)) await remote.stop();
        await mounts.close();
        await disk?.close({ keep: (opts.keep ?? false) && ids.length > 0 });
        await zram?.close();
        await store.close();
      })();
      return closing;
    },
  };
}
