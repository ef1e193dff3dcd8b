import { cachedImages } from './store/cached-images.js';
import { peerBlobs } from './cluster/peer-blobs.js';
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { HostHelper, listenEdgeApi, localEdgeApi, selfSignedCertificate } from '@warren/edge';
import { ImageCatalogue, LayerStore, installDefaultImages, prepareDefaultImages } from '@warren/images';
import { WarrenError } from '@warren/api';
import { SqliteStore } from './store/sqlite-store.js';
import { buildControlPlane, openDatabase } from './control-plane.js';
import { defaultNativeDir, openEdgeNode, remoteBlobs, type EdgeNodeOptions } from './edge-node.js';
import type { Logger, WarrenOptions } from './node.js';
import { JoinClient } from './cluster/join-client.js';
import { databaseHost, hostAddresses } from './cluster/join-address.js';

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
  await mkdir(o.dataDir, { recursive: true, mode: 0o700 });
  const layers = new LayerStore(join(o.dataDir, 'layers'));
  await layers.open();
  const store = o.database ? await openDatabase(o.database) : new SqliteStore(join(o.dataDir, 'warren.db'));
  const catalogue = new ImageCatalogue(layers, cachedImages(store));
  const prepared = await prepareDefaultImages({ cacheDir: o.imageCacheDir, only: o.images, log: (m) => o.logger.info(m) });
  await installDefaultImages(catalogue, prepared);
  const ops = new HostHelper(join(o.nativeDir ?? defaultNativeDir(), 'warren-hostd'), (why) =>
    o.logger.warn('warren-hostd died; a new one took its place', { error: String(why) }),
  );
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

/** `warren edge`: a node that joins a control plane. */
export interface EdgeOptions extends EdgeNodeOptions {
  /** The control plane's URL (`--join`). */
  join: string;
  /** The cluster's join token (`--token` or `WARREN_JOIN_TOKEN`). */
  token: string;
  /** The node's name (`--name`): its id in the cluster. */
  nodeId: string;
  /** Where its edge protocol listens (`--listen host:port`; port 0: any). */
  listen: { host: string; port: number };
  /** The address the control plane reaches it at (`--advertise host:port`; default the listen address). */
  advertise?: string;
  /**
   * Serve the edge protocol over TLS (`--tls`): a certificate made at each start (as its token
   * is), its fingerprint handed over in the join, which the control plane pins.
   */
  tls?: boolean;
  logger: Logger;
}

export interface RunningEdge {
  /** Where the control plane reaches this edge. */
  address: string;
  nodeId: string;
  /** Stops the edge; `keep` leaves its sandboxes running for the next start to take back (through the next join). */
  close(opts?: { keep?: boolean }): Promise<void>;
}

/**
 * Starts a node that joins a control plane (`warren edge --join`): its edge served over the edge
 * protocol on TCP with a token made for this start, then a join (the control plane reconciles
 * what this node runs with what the store says: sandboxes of a previous start are taken back
 * then) and heartbeats. A blob store the join names serves layers this node lacks.
 */
export async function startEdge(o: EdgeOptions): Promise<RunningEdge> {
  const node = await openEdgeNode(o);
  // Served only: what it is handed comes decoded from the wire.
  const api = localEdgeApi(node.edge, { fresh: true });
  const token = randomBytes(24).toString('base64url');
  const cert = o.tls ? selfSignedCertificate(o.nodeId) : null;
  const served = await listenEdgeApi(api, o.listen, { token, logger: o.logger, now: o.clock, tls: cert ?? undefined });
  const port = served.port;
  const address = o.advertise ?? `${o.listen.host.includes(':') ? `[${o.listen.host}]` : o.listen.host}:${port}`;
  const swap = await node.openSwap();
  let started = false;
  let remote = node.remote;
  const joiner = new JoinClient({
    url: o.join,
    token: o.token,
    node: {
      name: o.nodeId,
      address,
      token,
      boot: node.edge.boot,
      ...(cert ? { tlsFingerprint: cert.fingerprint } : {}),
      ...(o.fn?.pools?.length ? { fnPools: o.fn.pools } : {}),
    },
    load: () => api.load({ used: true }),
    logger: o.logger,
    onJoined: async (r) => {
      // The cluster's own hosts, and the control plane this node joined through, are out of its sandboxes' reach.
      if (node.network)
        await node.network
          .setClusterHosts(await hostAddresses([...(r.clusterHosts ?? []), new URL(o.join).hostname]))
          .catch((e: unknown) => o.logger.warn('the cluster’s hosts could not be kept from sandboxes', { error: String(e) }));
      if (!remote && r.blobStore) {
        // A relative URL is the control plane's own blobs, at the address this edge joined through.
        const blobs = { ...r.blobStore, url: new URL(r.blobStore.url, o.join).toString() };
        remote = remoteBlobs({ dataDir: o.dataDir, nativeDir: o.nativeDir ?? defaultNativeDir(), logger: o.logger }, blobs);
        await remote.start();
        node.layers.remote = remote;
      }
      // The sweep starts once the control plane has taken back (or failed) what ran before.
      if (!started) {
        started = true;
        await node.network?.sweep();
        node.edge.start();
      }
    },
  });
  const stopServing = async (): Promise<void> => {
    joiner.stop();
    await served.close();
  };
  try {
    await joiner.start();
  } catch (e) {
    await stopServing();
    await node.close({ keep: true, swap });
    throw e;
  }
  let closing: Promise<void> | null = null;
  return {
    address,
    nodeId: o.nodeId,
    close: (opts = {}) =>
      (closing ??= (async () => {
        await stopServing();
        await remote?.stop();
        await node.close({ keep: opts.keep ?? false, swap });
      })()),
  };
}
