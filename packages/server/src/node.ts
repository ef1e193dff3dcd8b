import { cachedImages } from './store/cached-images.js';
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { localEdgeApi, remoteEdgeApi, listenEdgeApi, type ContainerRuntime, type Edge, type EdgeApi } from '@warren/edge';
import { ImageCatalogue, installDefaultImages, type DefaultImageName } from '@warren/images';
import { SqliteStore } from './store/sqlite-store.js';
import type { FnOptions } from './services/fn.js';
import { buildControlPlane, openDatabase } from './control-plane.js';
import { openEdgeNode } from './edge-node.js';
import { databaseHost, hostAddresses } from './cluster/join-address.js';

export { VERSION } from './control-plane.js';

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
  /**
   * The microVM backend (QEMU `microvm`): on when QEMU and the guest kernel
   * (scripts/guest-kernel.sh, under `guestCacheDir`) are there, unless false. `snapshots:
   * false` boots every microVM's guest rather than cloning a template (a benchmark's cold boot);
   * `spares`: QEMUs kept started for the next clones (default 1; 0: none).
   */
  microvm?: false | { accel?: 'kvm' | 'tcg'; guestCacheDir?: string; snapshots?: boolean; spares?: number };
  /**
   * The full-VM backend (QEMU `q35` with a display; `"backend": "vm"`): on when QEMU and the
   * full VMs' guest kernel are there and the microVM backend is not turned off, unless false.
   * Its accelerator and guest cache are the microVM backend's; `snapshots` and `spares` as there;
   * `bootTimeoutMs`: how long a VM's first boot (its template's) may take (default 10 minutes).
   */
  vm?: false | { snapshots?: boolean; spares?: number; bootTimeoutMs?: number };
  /** How sandbox inits start: `native` (default) or `runc`. */
  runtime?: ContainerRuntime;
  images?: DefaultImageName[];
  defaultTtlSeconds?: number;
  /** The backend of a create that names none (default `container`). */
  defaultBackend?: 'container' | 'microvm' | 'vm';
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
   * 10.200.0.0/13); `poolSize` network namespaces are kept ready; `deny` lists IPv4 CIDRs no
   * sandbox reaches whatever its rules (the cluster's own hosts: those a join answers are added).
   */
  network?:
    | false
    | {
        hosts?: Record<string, string>;
        deny?: string[];
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
   * For tests only: a create waits at a step until the promise this answers for the step
   * resolves (undefined: it goes on): `create:stored` (its record written, nothing started on
   * the edge), `create:started` (made on its node, not yet recorded running).
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

/**
 * How the control plane reaches the edge: the edge itself (in-process), or, with
 * `edgeTransport: 'http'`, a client of the edge served on a Unix socket of the data dir, as a
 * control plane elsewhere would (same process; the suite runs on both).
 */
async function linkEdge(edge: Edge, o: WarrenOptions): Promise<{ api: EdgeApi; close(): Promise<void> }> {
  // Over the socket, what it is handed comes decoded from the wire.
  const local = localEdgeApi(edge, { fresh: o.edgeTransport === 'http' });
  if (o.edgeTransport !== 'http') return { api: local, close: async () => undefined };
  const token = randomBytes(24).toString('base64url');
  const socketPath = join(o.dataDir, 'run', 'edge.sock');
  await mkdir(join(o.dataDir, 'run'), { recursive: true });
  const served = await listenEdgeApi(local, socketPath, { token, logger: o.logger, now: o.clock });
  const api = remoteEdgeApi({ socketPath, token, now: o.clock });
  return {
    api,
    close: async () => {
      api.disconnect();
      await served.close();
    },
  };
}

/**
 * Starts the control plane and one edge in this process: its state in SQLite under `dataDir` (or
 * in PostgreSQL: `database`), the layer store under `dataDir`, default images from the cache,
 * sandboxes from an earlier run taken back.
 * @example
 * const w = await startWarren({ port: 7070, host: '127.0.0.1', dataDir: '/var/lib/warren', imageCacheDir: '/var/cache/warren/images', logger: console });
 */
export async function startWarren(o: WarrenOptions): Promise<RunningWarren> {
  // The control plane's state first (a database that cannot be opened fails the start before
  // anything is mounted), the image and layer catalogue included (over this node's blobs).
  await mkdir(o.dataDir, { recursive: true });
  const store = o.database ? await openDatabase(o.database) : new SqliteStore(join(o.dataDir, 'warren.db'));
  const node = await openEdgeNode(o).catch(async (e: unknown) => {
    await store.close();
    throw e;
  });
  const catalogue = new ImageCatalogue(node.layers, cachedImages(store));
  const adopted = await catalogue.adoptIndexFiles();
  if (adopted.images || adopted.layers) o.logger.info('took the image and layer index files into the store', adopted);
  await installDefaultImages(catalogue, node.prepared);
  // The control plane reaches the edge only through its API: in this process, or over HTTP.
  const link = await linkEdge(node.edge, o);
  const info = await link.api.info();
  const cp = await buildControlPlane({
    o: { ...o, dataDiskReserveBytes: node.diskReserve },
    store,
    catalogue,
    ops: node.mounts,
    local: { api: link.api, capacity: info.capacity, maxFileBytes: info.maxFileBytes },
    defaultDiskMiB: node.defaultDiskMiB,
    failpoint: node.failpoint,
  });
  cp.cluster.addLocal(link.api, info);
  const failed = async (e: unknown): Promise<never> => {
    await cp.close().catch(() => undefined);
    await link.close();
    await node.close({ keep: true, swap: null });
    await store.close();
    throw e;
  };
  const url = await (async () => {
    const recovered = await cp.sandboxes.sync.reconcile(info.nodeId);
    if (recovered.adopted || recovered.failed) o.logger.info('recovered sandboxes', recovered);
    await node.network?.sweep();
    // A database of its own host (PostgreSQL) is out of the sandboxes' reach, whatever their rules.
    const db = o.database ? databaseHost(o.database) : '';
    if (node.network && db) await node.network.setClusterHosts(await hostAddresses([db]));
    node.edge.start();
    return cp.start();
  })().catch(failed);
  // Last, when nothing after can fail: the swap is the host's, and must not outlive a failed start.
  const swap = await node.openSwap().catch(failed);
  if (swap) o.logger.info('zram swap on', { device: swap.device, sizeMiB: swap.sizeMiB });

  let closing: Promise<void> | null = null;
  return {
    url,
    adminKey: cp.adminKey,
    adminKeyFile: cp.adminKeyFile,
    sweep: async () => {
      const { lastEventSeq } = await link.api.sweep();
      await cp.cluster.reader(info.nodeId)?.reached(lastEventSeq);
    },
    close(opts = {}) {
      closing ??= (async () => {
        await cp.close();
        const ids = (await node.edge.states()).map((x) => x.id);
        await link.close();
        await node.close({ keep: opts.keep ?? false, swap });
        if (!opts.keep) for (const id of ids) await store.updateSandbox(id, { state: 'stopped' });
        await store.close();
      })();
      return closing;
    },
  };
}
