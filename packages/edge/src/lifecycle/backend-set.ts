import { WarrenError } from '@warren/api';
import type { Backend, BackendCapabilities, SandboxStats } from '../backends/backend.js';
import type { EdgeSandboxSpec } from './edge-spec.js';
import type { Live } from './live.js';

/** The backends a node runs, by name (the first is the default), and what each can do. */
export class BackendSet {
  constructor(readonly all: Backend[]) {
    if (all.length === 0) throw new Error('an edge needs at least one backend');
  }

  /** The backend a spec names (the first when it names none); invalid_argument for one this node lacks. */
  pick(spec: EdgeSandboxSpec): Backend {
    const b = spec.backend === undefined ? this.all[0] : this.all.find((x) => x.name === spec.backend);
    if (!b) throw new WarrenError('invalid_argument', `backend "${spec.backend ?? ''}" is not available on this node`, { backend: spec.backend });
    if (spec.fn && !b.capabilities.fnWorkers) throw new WarrenError('invalid_argument', `backend "${b.name}" cannot run FnCall workers`, { backend: b.name });
    return b;
  }

  /** Names and capabilities, as the node reports them. */
  describe(): Array<{ name: string; capabilities: BackendCapabilities; accelerator: string | null }> {
    return this.all.map((b) => ({ name: b.name, capabilities: { ...b.capabilities }, accelerator: b.accelerator ?? null }));
  }

  /** What every backend's sandboxes use together. */
  /** Memory the backends' running sandboxes hold beyond their requests (see Backend.heldBeyondRequestsMiB). */
  heldBeyondRequestsMiB(): number {
    let n = 0;
    for (const b of this.all) n += b.heldBeyondRequestsMiB?.() ?? 0;
    return n;
  }

  async totals(): Promise<SandboxStats> {
    const all = await Promise.all(this.all.map((b) => b.totals()));
    const sum = { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
    for (const t of all) {
      sum.cpuSeconds += t.cpuSeconds;
      sum.memoryBytes += t.memoryBytes;
      sum.swapBytes += t.swapBytes;
    }
    return sum;
  }
}

/** The sandbox, when its backend can do `what`; invalid_argument (before the backend is asked) when it cannot. */
export function capable(l: Live, id: string, what: keyof BackendCapabilities, verb: string): Live {
  if (!l.backend.capabilities[what]) throw new WarrenError('invalid_argument', `a ${l.backend.name} sandbox cannot ${verb}`, { id, backend: l.backend.name });
  return l;
}
