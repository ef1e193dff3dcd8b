import { readFile, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { checkRoom, dataDiskRoom, type EdgeApi, type EdgeCapacity, type EdgeEvent } from '@warren/edge';
import { DEFAULTS, WarrenError, type JoinNodeResponse } from '@warren/api';
import { DEFAULT_ID_MAP, type FsOps, type ImageCatalogue } from '@warren/images';
import type { Store } from './store/store.js';
import { PgStore } from './store/pg-store.js';
import { Auth } from './services/auth.js';
import { SandboxService } from './services/sandboxes.js';
import { ImageService } from './services/images.js';
import { PoolService } from './services/pools.js';
import { FnService } from './services/fn.js';
import { ForkService } from './services/forks.js';
import { SnapshotService } from './services/snapshots.js';
import { ImageUse } from './services/image-use.js';
import { LeaseService } from './services/leases.js';
import { EventLog } from './services/events.js';
import { Webhooks } from './services/webhooks.js';
import { compileWebhooks } from './services/webhook-options.js';
import { CommandService } from './services/commands.js';
import { MetricsHistory } from './services/history.js';
import { FileService } from './services/files.js';
import { NodeService } from './services/nodes.js';
import { AuditLog } from './services/audit.js';
import { nodeEventHandler } from './services/node-events.js';
import { closeAllConnections, createApp } from './http/app.js';
import type { RouteDeps } from './http/route-types.js';
import { Cluster } from './cluster/cluster.js';
import type { WarrenOptions } from './node.js';

/** What the control plane is built from: its options, its state, and the nodes it places on. */
export interface ControlPlaneParts {
  o: Pick<
    WarrenOptions,
    | 'port'
    | 'host'
    | 'dataDir'
    | 'adminKey'
    | 'defaultTtlSeconds'
    | 'defaultBackend'
    | 'fn'
    | 'maxUploadBytes'
    | 'pullRegistries'
    | 'webhooks'
    | 'holdAt'
    | 'clock'
    | 'logger'
  > & { dataDiskReserveBytes: number };
  store: Store;
  catalogue: ImageCatalogue;
  /** File operations as root for imports (warren-hostd). */
  ops: FsOps;
  /** The edge in this process (`warren up`): warm pools and FnCall workers run there. */
  local: { api: EdgeApi; capacity: EdgeCapacity; maxFileBytes: number } | null;
  /** A sandbox's writable layer when it asks for no limit (MiB); null: creates may not ask for one. */
  defaultDiskMiB: number | null;
  /** The token edges join with (`warren server`). */
  joinToken?: string;
  /** The networks a joining edge's address must be in (CIDRs; default DEFAULT_EDGE_NETWORKS). */
  edgeNetworks?: readonly string[];
  /** The control plane's own hosts (replicas, database) a joining node keeps its sandboxes from (see NodeService). */
  clusterHosts?: () => Promise<string[]>;
  /** Joins of edges without TLS on their edge protocol are refused. */
  requireEdgeTls?: boolean;
  /** What a joining edge reads layers it lacks from. */
  blobStore?: () => JoinNodeResponse['blobStore'];
  /** Sends a blob this process lacks from another replica's (see peerBlobs). */
  peerBlob?: RouteDeps['peerBlob'];
  /** Heartbeats and the down delay (ms). */
  heartbeatMs?: number;
  downAfterMs?: number;
  failpoint?: (step: string) => void;
  /**
   * A create still `creating` this long after it was made was cut off (its replica died): it is
   * failed and what its node started removed (ms; default 300,000). Checked by a control plane
   * without a local node; `warren up` does it at start (reconcile).
   */
  staleCreateMs?: number;
}

/** The control plane, built (see buildControlPlane): start it once the local node is reconciled. */
export interface ControlPlane {
  cluster: Cluster;
  sandboxes: SandboxService;
  adminKey: string;
  adminKeyFile: string | null;
  /** Starts pools and FnCall workers, removes orphan layers, and serves the API; answers its URL. */
  start(): Promise<string>;
  close(): Promise<void>;
}

/** A PostgreSQL store at `url` (the error names the database without its password). */
export async function openDatabase(url: string): Promise<Store> {
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

/** The bootstrap admin key: the one given, or the data dir's (made on the first start). */
async function adminKeyOf(o: { adminKey?: string; dataDir: string }): Promise<{ key: string; file: string | null }> {
  if (o.adminKey) return { key: o.adminKey, file: null };
  const file = join(o.dataDir, 'admin.key');
  let key = (await readFile(file, 'utf8').catch(() => '')).trim();
  if (!key) {
    key = `wk_${randomBytes(24).toString('base64url')}`;
    await writeFile(file, key + '\n', { mode: 0o600 });
  }
  return { key, file };
}

/**
 * Builds the control plane's services over a store and a cluster (the nodes it places on and
 * reaches): sandboxes, commands, files, images, pools, FnCall, nodes, keys and audit, and the
 * HTTP API over them.
 */
export async function buildControlPlane(p: ControlPlaneParts): Promise<ControlPlane> {
  const { o, store } = p;
  // Checked first: a bad webhook URL or a missing secret stops the start before anything runs.
  const hooks = compileWebhooks(o.webhooks);
  let handle: (node: string, ev: EdgeEvent) => Promise<void> = async () => undefined;
  const events = new EventLog(store, o.logger);
  const cluster = new Cluster({
    store,
    downAfterMs: p.downAfterMs,
    onEvent: (node, ev) => handle(node, ev),
    // The sandboxes a lost node took with it: each one's end in the events.
    onNodeDown: (_node, failed) =>
      void Promise.all(
        failed.map(async (id) => {
          const rec = await store.getSandbox(id);
          if (rec?.end) service.noteEnd(rec, rec.end);
        }),
      ).catch(() => undefined),
    logger: o.logger,
  });
  const service = new SandboxService(store, cluster, p.catalogue, {
    failpoint: p.failpoint,
    holdAt: o.holdAt,
    defaultTtlSeconds: o.defaultTtlSeconds ?? DEFAULTS.sandbox.ttlSeconds,
    defaultBackend: o.defaultBackend ?? 'container',
    defaults: { ...DEFAULTS.sandbox.resources, diskMiB: p.defaultDiskMiB },
    logger: o.logger,
    now: o.clock,
  });
  const pools = new PoolService(store, cluster, service, { logger: o.logger });
  const fn = new FnService(cluster, p.catalogue, {
    ...o.fn,
    logger: o.logger,
    quota: {
      usage: async (tenant) => {
        const s = await store.tenantUsage(tenant);
        const h = pools.held(tenant);
        return { sandboxes: s.sandboxes + h.sandboxes, cpu: s.cpu + h.cpu, memoryMiB: s.memoryMiB + h.memoryMiB };
      },
    },
  });
  service.fn = fn;
  service.pools = pools;
  service.events = events;
  const leases = new LeaseService(store, cluster, service, { logger: o.logger, events });
  handle = nodeEventHandler({
    store,
    sandboxes: service,
    local: (node) => cluster.all().some((n) => n.id === node && n.local),
    logger: o.logger,
  });
  const commands = new CommandService(store, service, { failpoint: p.failpoint });
  const files = new FileService(service, p.local?.maxFileBytes ?? 64 * 2 ** 30);
  const images = new ImageService(p.catalogue, () => cluster.up().map((n) => n.api), {
    idMap: DEFAULT_ID_MAP,
    ops: p.ops,
    maxUploadBytes: o.maxUploadBytes ?? 64 * 2 ** 30,
    pullRegistries: o.pullRegistries,
    logger: o.logger,
    failpoint: p.failpoint,
    checkDisk: async (what) => checkRoom(await dataDiskRoom(o.dataDir), o.dataDiskReserveBytes, what),
  });
  const imageUse = new ImageUse(store);
  const snapshots = new SnapshotService(service, images, p.catalogue, imageUse);
  const forks = new ForkService(store, cluster, service, images, { defaultTtlSeconds: o.defaultTtlSeconds ?? DEFAULTS.sandbox.ttlSeconds, now: o.clock });
  const webhooks = new Webhooks(store, hooks?.hooks ?? [], { secret: hooks?.secret ?? '', logger: o.logger });
  const admin = await adminKeyOf(o);
  const auth = new Auth(store, admin.key, p.joinToken, { now: o.clock });
  const audit = new AuditLog(store, (e, entries) => o.logger.warn('audit entries were not written', { entries, error: String(e) }));
  let url = '';
  const nodes = new NodeService(store, cluster, service, {
    heartbeatMs: p.heartbeatMs ?? 1000,
    downAfterMs: p.downAfterMs ?? 10_000,
    blobStore: p.blobStore,
    localAddress: () => url,
    edgeNetworks: p.edgeNetworks,
    clusterHosts: p.clusterHosts,
    requireEdgeTls: p.requireEdgeTls,
    onFnPools: (node, pools) => void fn.warmNode(node, pools),
    logger: o.logger,
  });
  const history = new MetricsHistory({
    logger: o.logger,
    sample: async () => {
      const { nodes: all } = await nodes.list();
      const sum = (f: (n: (typeof all)[number]) => number): number => all.reduce((x, n) => x + f(n), 0);
      return {
        creates: service.placer.counts.created,
        commands: commands.counts.started,
        commandErrors: commands.counts.failed,
        fnCalls: sum((n) => n.fn.calls),
        running: sum((n) => n.sandboxes - n.paused),
        paused: sum((n) => n.paused),
        cpuUsed: sum((n) => n.used.cpu),
        memoryUsedMiB: sum((n) => n.used.memoryMiB),
      };
    },
  });
  const server: Server = createApp({
    version: VERSION,
    auth,
    sandboxes: service,
    commands,
    files,
    nodes,
    catalogue: p.catalogue,
    images,
    pools,
    fn,
    leases,
    forks,
    snapshots,
    imageUse,
    events,
    webhooks,
    audit,
    history,
    logger: o.logger,
    peerBlob: p.peerBlob,
  });
  let flush: NodeJS.Timeout | null = null;
  let janitor: NodeJS.Timeout | null = null;
  return {
    cluster,
    sandboxes: service,
    adminKey: admin.key,
    adminKeyFile: admin.file,
    async start() {
      await pools.start();
      await fn.start();
      leases.start();
      events.start();
      webhooks.start();
      history.start();
      flush = setInterval(() => void service.sync.flushActivity().catch(() => undefined), 5000);
      flush.unref();
      if (!p.local) {
        const stale = p.staleCreateMs ?? 300_000;
        janitor = setInterval(
          () => void service.sync.endStaleCreates(stale).catch((e: unknown) => o.logger.warn('the check for cut-off creates failed', { error: String(e) })),
          Math.min(10_000, Math.max(200, stale / 4)),
        );
        janitor.unref();
      }
      // A commit, import or upload cut off by a crash leaves a whole layer that nothing names:
      // it goes now that the sandboxes that came back (and the layers they use) are known.
      const orphans = await images.collectGarbage().catch((e: unknown) => {
        o.logger.warn('garbage collection at start failed', { error: String(e) });
        return [];
      });
      if (orphans.length) o.logger.info('removed layers nothing names', { layers: orphans });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(o.port, o.host, () => resolve());
      });
      const addr = server.address() as AddressInfo;
      url = `http://${o.host.includes(':') ? `[${o.host}]` : o.host}:${addr.port}`;
      return url;
    },
    async close() {
      if (flush) clearInterval(flush);
      history.close();
      if (janitor) clearInterval(janitor);
      await new Promise<void>((resolve) => {
        if (!server.listening) return resolve();
        server.close(() => resolve());
        closeAllConnections(server);
      });
      service.queue.close();
      pools.close();
      fn.close();
      await leases.close();
      events.close();
      await webhooks.close();
      await service.sync.flushActivity().catch(() => undefined);
      await audit.close();
      await cluster.close();
    },
  };
}

export const VERSION = '0.1.0';
