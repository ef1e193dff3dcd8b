import { randomBytes } from 'node:crypto';
import { localEdgeApi } from '../edge-api/local.js';
import { listenEdgeApi } from '../edge-api/server.js';
import { selfSignedCertificate } from '../edge-api/tls-cert.js';
import type { Logger } from '../util/logger.js';
import { JoinClient } from './join-client.js';
import type { EdgeNodeOptions } from './node-options.js';
import { openEdgeNode } from './open-node.js';
import { defaultNativeDir } from './platform-files.js';
import { remoteBlobs } from './remote-blobs.js';

/** `warren edge`: a node that joins a control plane. */
export interface StartEdgeOptions extends EdgeNodeOptions {
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

/** A node started by startEdge or startSimulatedEdge, joined to its control plane. */
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
 * @example
 * const e = await startEdge({ join: 'http://warren.example:7070', token, nodeId: 'node-17', listen: { host: '0.0.0.0', port: 7071 }, dataDir: '/var/lib/warren', imageCacheDir: '/var/cache/warren/images', logger: console });
 */
export async function startEdge(o: StartEdgeOptions): Promise<RunningEdge> {
  const node = await openEdgeNode(o);
  // Served only: what it is handed comes decoded from the wire.
  const api = localEdgeApi(node.edge, { fresh: true, layers: node.layers });
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
      await node
        .keepFromSandboxes([...(r.clusterHosts ?? []), new URL(o.join).hostname])
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
        await node.start();
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
