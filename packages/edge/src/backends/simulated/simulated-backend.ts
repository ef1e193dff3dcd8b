import { WarrenError } from '@warren/api';
import type { LayerInfo } from '@warren/images';
import type { Backend, BackendCreateSpec, BackendSandbox, SandboxStats } from '../backend.js';
import { simulatedWorkerConnection } from './simulated-worker.js';

const NONE: SandboxStats = { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };

/**
 * A backend that makes no sandboxes: it remembers ids. With it, a node runs the real edge —
 * admission, accounting, the sandbox registry, the EdgeApi and its network transport, joins and
 * heartbeats — at no cost per sandbox, which is how one machine stands in for a cluster of
 * hundreds of nodes (`warren edge --simulate`, bench/src/cluster.ts). Its FnCall workers answer
 * every call at once (simulatedWorkerConnection), so the edge's FnWorkers and the control plane's
 * FnCall routing run for real; anything else that needs a sandbox's agent (commands, files)
 * answers `invalid_argument`.
 */
export class SimulatedBackend implements Backend {
  readonly name = 'container';
  readonly capabilities = { pause: true, commit: false, ports: false, fnWorkers: true, network: true };
  private readonly ids = new Set<string>();

  async create(spec: BackendCreateSpec): Promise<BackendSandbox> {
    this.ids.add(spec.id);
    return {
      id: spec.id,
      connect: spec.fn
        ? () => Promise.resolve(simulatedWorkerConnection())
        : () => Promise.reject(new WarrenError('invalid_argument', 'a simulated sandbox runs nothing', { id: spec.id })),
      initPid: null,
      initStartTime: null,
    };
  }

  async started(): Promise<void> {}

  async adopt(id: string): Promise<BackendSandbox | null> {
    return this.ids.has(id) ? this.create({ id, layers: [], resources: { cpu: 0, memoryMiB: 0, pids: 0 } }) : null;
  }

  async destroy(id: string): Promise<void> {
    this.ids.delete(id);
  }

  async pause(): Promise<void> {}

  async reclaim(): Promise<number> {
    return 0;
  }

  async resume(): Promise<void> {}

  async stats(): Promise<SandboxStats> {
    return NONE;
  }

  async totals(): Promise<SandboxStats> {
    return NONE;
  }

  async exited(): Promise<boolean> {
    return false;
  }

  commit(): Promise<LayerInfo> {
    return Promise.reject(new WarrenError('invalid_argument', 'a simulated sandbox has no changes to commit'));
  }

  async releaseLayers(): Promise<void> {}

  async forgetLayers(): Promise<void> {}

  async list(): Promise<string[]> {
    return [...this.ids];
  }

  async close(): Promise<void> {}
}
