import { cachedImages } from './store/cached-images.js';
import { peerBlobs } from './cluster/peer-blobs.js';
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { hostFileOps } from '@warren/edge';
import { ImageCatalogue, LayerStore, installDefaultImages, prepareDefaultImages } from '@warren/images';
import { WarrenError } from '@warren/api';
import { SqliteStore } from './store/sqlite-store.js';
import { buildControlPlane, openDatabase } from './control-plane.js';
import type { WarrenOptions } from './node.js';
import { compileWebhooks } from './services/webhook-options.js';
import { databaseHost } from './cluster/join-address.js';

/** `warren server`: the control plane alone; edges join it. */
export interface ServerOptions
  extends Pick<
    WarrenOptions,
    | 'port'
    | 'host'
    | 'dataDir'
    | 'database'
    | 'imageCacheDir'
    | 'images'
    | 'adminKey'
    | 'defaultTtlSeconds'
    | 'defaultBackend'
    | 'maxUploadBytes'
    | 'pullRegistries'
    | 'webhooks'
    | 'nativeDir'
    | 'logger'
    | 'fn'
  > {
  /** What edges join with (`WARREN_JOIN_TOKEN`). */
  joinToken: string;
  /**
   * The networks edges join from (`--edge-networks`, CIDRs): a join naming an address outside
   * them is refused before anything is dialled. Default: loopback and the private ranges
   * (DEFAULT_EDGE_NETWORKS); name the nodes' own subnet.
   */
  edgeNetworks?: string[];
  /**
   * Refuse edges whose edge protocol is plain TCP (`--require-edge-tls`): every node must start
   * with `--tls`, so the edge tokens, files, env and stdin that cross to nodes are encrypted.
   */
  requireEdgeTls?: boolean;
  /** A node silent this long is down and its sandboxes failed (ms; default 10,000). */
  downAfterMs?: number;
  /** How often edges send heartbeats (ms; default 1000). */
  heartbeatMs?: number;
  /** A create left `creating` this long was cut off (ms; default 300,000; see ControlPlaneParts.staleCreateMs). */
  staleCreateMs?: number;
  /** For fault-injection tests only: the process kills itself at this step (see WarrenOptions.crashAt). */
  crashAt?: string;
  /**
   * The blob store joining edges read layers they lack from (`--blob-url`); default this
   * server's own blobs (`/v1/blobs/`, read with the join token).
   */
  blobStore?: { url: string; key?: string };
  /**
   * `host:port` where the other replicas reach this one (`--advertise`; default the listen
   * address): they read the blobs made through it from there. Needed when it listens on 0.0.0.0.
   */
  advertise?: string;
}

export interface RunningServer {
  url: string;
  adminKey: string;
  adminKeyFile: string | null;
  close(): Promise<void>;
}

/**
 * Starts a control plane without an edge of its own (`warren server`): its state in the store
 * (PostgreSQL for several replicas; SQLite in the data dir for one), the image catalogue over
 * this server's blobs (the default images' layers are built there, the cluster's blob store for
 * nodes that lack them), the node table read every second, and the API, where edges join with
 * the join token. Replicas on one database serve the same cluster: any one answers any call.
 * @example
 * const s = await startServer({ port: 7070, host: '0.0.0.0', dataDir: '/var/lib/warren-server', database: 'postgres://warren@db.example/warren', imageCacheDir: '/var/cache/warren/images', joinToken, logger: console });
 */
export async function startServer(o: ServerOptions): Promise<RunningServer> {
  if (o.joinToken.length < 16) throw new WarrenError('invalid_argument', 'the join token (WARREN_JOIN_TOKEN) must be at least 16 characters');
  compileWebhooks(o.webhooks); // before anything is opened
  await mkdir(o.dataDir, { recursive: true, mode: 0o700 });
  const layers = new LayerStore(join(o.dataDir, 'layers'));
  await layers.open();
  const store = o.database ? await openDatabase(o.database) : new SqliteStore(join(o.dataDir, 'warren.db'));
  const catalogue = new ImageCatalogue(layers, cachedImages(store));
  const prepared = await prepareDefaultImages({ cacheDir: o.imageCacheDir, only: o.images, log: (m) => o.logger.info(m) });
  await installDefaultImages(catalogue, prepared);
  const ops = hostFileOps({ nativeDir: o.nativeDir, logger: o.logger });
  let url = '';
  // This replica in the store: its peers read the blobs made through it from its URL.
  const replica = `r_${randomBytes(8).toString('hex')}`;
  const cp = await buildControlPlane({
    o: { ...o, dataDiskReserveBytes: 256 * 2 ** 20 },
    store,
    catalogue,
    ops,
    local: null,
    defaultDiskMiB: null,
    joinToken: o.joinToken,
    edgeNetworks: o.edgeNetworks,
    requireEdgeTls: o.requireEdgeTls,
    // The replicas (each says where it is reached) and the database: no sandbox reaches them.
    clusterHosts: async () => [
      ...(await store.liveReplicas(60_000, '')).map((r) => new URL(r.url).hostname),
      ...(o.database ? [databaseHost(o.database)] : []),
    ],
    // Relative by default: an edge reads it from the address it joined through.
    blobStore: () => o.blobStore ?? { url: '/v1/blobs/', key: o.joinToken },
    peerBlob: peerBlobs({ store, self: replica, joinToken: o.joinToken }),
    heartbeatMs: o.heartbeatMs,
    downAfterMs: o.downAfterMs,
    staleCreateMs: o.staleCreateMs,
    failpoint: o.crashAt
      ? (step) => {
          if (step === o.crashAt) process.kill(process.pid, 'SIGKILL');
        }
      : undefined,
  });
  await cp.cluster.start();
  url = await cp.start();
  const seen = (): Promise<void> =>
    store
      .seeReplica(replica, o.advertise ? `http://${o.advertise}` : url)
      .catch((e: unknown) => o.logger.warn('could not say this replica is alive', { error: String(e) }));
  await seen();
  const alive = setInterval(() => void seen(), 5000);
  alive.unref();
  let closing: Promise<void> | null = null;
  return {
    url,
    adminKey: cp.adminKey,
    adminKeyFile: cp.adminKeyFile,
    close: () =>
      (closing ??= (async () => {
        clearInterval(alive);
        await cp.close();
        await ops.close();
        await store.close();
      })()),
  };
}
