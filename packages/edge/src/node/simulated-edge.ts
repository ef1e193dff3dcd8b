import { randomBytes } from 'node:crypto';
import { SimulatedBackend } from '../backends/simulated/simulated-backend.js';
import { localEdgeApi } from '../edge-api/local.js';
import { listenEdgeApi } from '../edge-api/server.js';
import { Edge } from '../lifecycle/edge.js';
import type { Logger } from '../util/logger.js';
import { JoinClient } from './join-client.js';
import type { RunningEdge } from './start-edge.js';

/** A simulated node: the control plane it joins, its name, where it listens and what it promises. */
export interface SimulatedEdgeOptions {
  join: string;
  token: string;
  nodeId: string;
  listen: { host: string; port: number };
  /** What the node promises: admission counts against it as on a real node. */
  capacity: { cpu: number; memoryMiB: number; sandboxes: number };
  logger: Logger;
}

/**
 * A node that runs the real edge (admission, accounting, the registry, the EdgeApi over its
 * network transport, joins and heartbeats) over a backend that makes no sandboxes
 * (SimulatedBackend): `warren edge --simulate`, and the cluster benchmark's 160 nodes.
 */
export async function startSimulatedEdge(o: SimulatedEdgeOptions): Promise<RunningEdge> {
  const c = o.capacity;
  const edge = new Edge({
    nodeId: o.nodeId,
    backends: [new SimulatedBackend()],
    capacity: { cpu: c.cpu, memoryMiB: c.memoryMiB, sandboxes: c.sandboxes, maxCpuPerSandbox: c.cpu, maxMemoryMiBPerSandbox: c.memoryMiB },
    memoryFloorMiB: 0,
    // Its sandboxes run nothing: nothing expires or dies between sweeps that a test waits on, and
    // hundreds of simulated nodes share one process.
    sweepMs: 10_000,
    logger: o.logger,
  });
  // Served only: what it is handed comes decoded from the wire.
  const api = localEdgeApi(edge, { fresh: true });
  const token = randomBytes(24).toString('base64url');
  const served = await listenEdgeApi(api, o.listen, { token, logger: o.logger });
  const address = `${o.listen.host}:${served.port}`;
  const joiner = new JoinClient({
    url: o.join,
    token: o.token,
    node: { name: o.nodeId, address, token, boot: edge.boot },
    load: () => api.load({ used: true }),
    logger: o.logger,
  });
  try {
    await joiner.start();
  } catch (e) {
    joiner.stop();
    await served.close();
    throw e;
  }
  edge.start();
  return {
    address,
    nodeId: o.nodeId,
    close: async () => {
      joiner.stop();
      await served.close();
      await edge.close({ keep: false });
    },
  };
}
