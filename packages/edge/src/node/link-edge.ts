import type { LayerStore } from '@warren/images';
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Edge } from '../lifecycle/edge.js';
import type { EdgeApi } from '../edge-api/edge-api.js';
import { localEdgeApi } from '../edge-api/local.js';
import { listenEdgeApi } from '../edge-api/server.js';
import { remoteEdgeApi } from '../edge-api/client.js';
import type { Logger } from '../util/logger.js';

/** How a control plane in the node's own process reaches its edge: `in-process` (default) or `http`. */
export type EdgeTransport = 'in-process' | 'http';

/** The EdgeApi a control plane in this process calls, and how to let go of it. */
export interface LinkedEdge {
  api: EdgeApi;
  close(): Promise<void>;
}

/**
 * How the control plane reaches the edge: the edge itself (in-process), or, with `transport:
 * 'http'`, a client of the edge served on a Unix socket of the data dir, as a control plane
 * elsewhere would (same process; the suite runs on both).
 */
export async function linkEdge(
  edge: Edge,
  o: { transport?: EdgeTransport; dataDir: string; logger: Logger; clock?: () => number; layers?: LayerStore },
): Promise<LinkedEdge> {
  // Over the socket, what it is handed comes decoded from the wire.
  const local = localEdgeApi(edge, { fresh: o.transport === 'http', layers: o.layers });
  if (o.transport !== 'http') return { api: local, close: async () => undefined };
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
