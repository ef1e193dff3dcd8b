import { randomText } from '@warren/api';
import { FnWorkers, type FnGroupSpec, type FnWorkersOptions } from '../fn/fn-workers.js';
import type { FnCallOutcome, FnCallSpec } from '../fn/fn-call.js';
import { fnWorkerSpec, type EdgeSandboxSpec } from './edge-spec.js';
import { PoolMembers } from './pool-members.js';

/** What a node's own sandboxes need of the node. */
export interface OwnSandboxNode {
  create(spec: EdgeSandboxSpec): Promise<void>;
  destroy(id: string): Promise<void>;
  fnCall(id: string, spec: FnCallSpec): Promise<FnCallOutcome>;
  has(id: string): boolean;
  now(): number;
  logger?: { warn(msg: string, meta?: unknown): void };
}

/** A sandbox id made on the node, in the control plane's form (sb_, time, random). */
const newId = (): string => `sb_${Date.now().toString(36).padStart(9, '0')}${randomText(6, 'hex')}`;

/**
 * The sandboxes a node makes for nobody yet and owns until then: its FnCall workers and its
 * share of the warm pools.
 */
export function ownSandboxes(n: OwnSandboxNode, fn: Omit<FnWorkersOptions, 'logger'> = {}): { fn: FnWorkers; pools: PoolMembers } {
  return {
    fn: new FnWorkers(
      {
        create: (id: string, g: FnGroupSpec) => n.create(fnWorkerSpec(id, g, n.now())),
        destroy: (id) => n.destroy(id),
        call: (id, spec) => n.fnCall(id, spec),
        newId,
      },
      { ...fn, logger: n.logger },
    ),
    pools: new PoolMembers({
      create: (spec) => n.create(spec),
      destroy: (id) => n.destroy(id),
      has: (id) => n.has(id),
      newId,
      now: () => n.now(),
      logger: n.logger,
    }),
  };
}
