import { cachedImages } from './store/cached-images.js';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { openEdgeNode, type EdgeNodeOptions, type EdgeTransport } from '@warren/edge';
import { ImageCatalogue, installDefaultImages } from '@warren/images';
import { SqliteStore } from './store/sqlite-store.js';
import { recordShutdown } from './services/sandbox-ends.js';
import type { FnOptions } from './services/fn.js';
import { compileWebhooks, type WebhookOptions } from './services/webhook-options.js';
import { buildControlPlane, openDatabase } from './control-plane.js';
import { databaseHost } from './cluster/join-address.js';

export { VERSION } from './control-plane.js';
export type { Logger } from '@warren/edge';

/**
 * `warren up`: a node's edge (EdgeNodeOptions, the edge package's) and the control plane in front
 * of it, in one process.
 */
export interface WarrenOptions extends EdgeNodeOptions {
  port: number;
  host: string;
  /**
   * The control plane's state in PostgreSQL (`postgres://` or `postgresql://`); default: SQLite
   * in the data dir (`warren.db`). Several nodes may share one database (each with its own
   * `nodeId`).
   */
  database?: string;
  adminKey?: string;
  defaultTtlSeconds?: number;
  /** The backend of a create that names none (default `container`). */
  defaultBackend?: 'container' | 'microvm' | 'vm';
  /** FnCall workers: warm pools, limits (see FnOptions). */
  fn?: Omit<FnOptions, 'logger'>;
  /** Largest image archive or layer upload, in bytes (default 64 GiB). */
  maxUploadBytes?: number;
  /** Registries (`host[:port]`) non-admin keys may pull from (default none: only admins pull). */
  pullRegistries?: string[];
  /**
   * Every tenant's lifecycle events POSTed to these URLs as they happen, signed with the secret
   * (`--webhook`, `--webhook-secret-file`): at least once, in order (see WebhookDeliverer).
   */
  webhooks?: WebhookOptions;
  /**
   * For tests only: a create waits at a step until the promise this answers for the step
   * resolves (undefined: it goes on): `create:stored` (its record written, nothing started on
   * the edge), `create:started` (made on its node, not yet recorded running).
   */
  holdAt?: (step: string) => Promise<void> | undefined;
  /**
   * How the control plane reaches this node's edge: `in-process` (default) or `http`, the
   * network transport on a Unix socket of the data dir (what a control plane on another
   * machine uses; the test suite runs once on each).
   */
  edgeTransport?: EdgeTransport;
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
 * Starts the control plane and one edge in this process: its state in SQLite under `dataDir` (or
 * in PostgreSQL: `database`), the layer store under `dataDir`, default images from the cache,
 * sandboxes from an earlier run taken back.
 * @example
 * const w = await startWarren({ port: 7070, host: '127.0.0.1', dataDir: '/var/lib/warren', imageCacheDir: '/var/cache/warren/images', logger: console });
 */
export async function startWarren(o: WarrenOptions): Promise<RunningWarren> {
  compileWebhooks(o.webhooks); // a bad webhook option stops the start before anything is opened
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
  const link = await node.link(o.edgeTransport);
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
    // A database of its own host (PostgreSQL) is out of the sandboxes' reach, whatever their rules.
    await node.start(o.database ? [databaseHost(o.database)] : []);
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
        await link.close();
        const ids = await node.close({ keep: opts.keep ?? false, swap });
        if (!opts.keep) await recordShutdown(store, ids);
        await store.close();
      })();
      return closing;
    },
  };
}
