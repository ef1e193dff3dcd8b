import type { ListNodesResponse } from '@warren/api';
import type { EdgeApi, EdgeInfo } from '@warren/edge';

/** The nodes that run sandboxes (today one, this process's edge): what they promise and carry. */
export class NodeService {
  constructor(
    private readonly edge: EdgeApi,
    private readonly info: EdgeInfo,
    /** Where the node's edge is reached (known once the server listens). */
    private readonly address: () => string,
  ) {}

  async list(): Promise<ListNodesResponse> {
    const cap = this.info.capacity;
    const load = await this.edge.load({ used: true });
    return {
      nodes: [
        {
          id: this.info.nodeId,
          address: this.address(),
          state: 'ready',
          capacity: { cpu: cap.cpu, busyCpu: cap.busyCpu ?? null, memoryMiB: cap.memoryMiB, sandboxes: cap.sandboxes },
          allocated: load.requested,
          committed: load.committed,
          used: load.used ?? { cpu: 0, memoryMiB: 0, swapMiB: 0 },
          sandboxes: load.sandboxes,
          paused: load.paused,
          lastHeartbeatAt: new Date().toISOString(),
        },
      ],
    };
  }

  /** The backends a create may name, with whether a node runs each (Warren knows three). */
  backends(): Array<{ name: string; available: boolean; accelerator: string | null }> {
    return (['container', 'microvm', 'vm'] as const).map((name) => ({ name, available: this.info.backends.some((b) => b.name === name), accelerator: null }));
  }

  /** The nodes' gauges and per-sandbox network counters, Prometheus text. */
  async metrics(): Promise<string> {
    const { committed: u, sandboxes } = await this.edge.load();
    return (
      `# TYPE warren_sandboxes gauge\nwarren_sandboxes ${sandboxes}\n` +
      `# TYPE warren_allocated_cpu gauge\nwarren_allocated_cpu ${u.cpu}\n` +
      `# TYPE warren_allocated_memory_mib gauge\nwarren_allocated_memory_mib ${u.memoryMiB}\n` +
      (await this.edge.networkMetrics())
    );
  }
}
