import { memoryRequestOf } from '@warren/api';
import type { EdgeSandboxSpec } from './edge-spec.js';
import type { Live } from './live.js';

/** What one paused sandbox takes off its node's committed CPU and memory. */
interface Relief {
  cpu: number;
  memoryMiB: number;
}

type Resources = Pick<EdgeSandboxSpec['resources'], 'cpu' | 'memoryMiB' | 'memoryRequestMiB'>;

/**
 * What a node's sandboxes commit, kept as they come, pause, resume and go, so that admission and
 * the node's load report read it in O(1): walking every sandbox at each create and each report
 * took ~20 ms a create at 9,500 paused sandboxes (CPU profile of bench:idle).
 *
 * - Requested: the CPUs and memory requests of every sandbox held or being made (reserve,
 *   release), paused ones included.
 * - Relief: a paused one counts no CPU and only the memory still resident after its page-out
 *   (never more than its request); until its page-out is done it counts as running (`update`,
 *   told after every change of its pause, page-out or presence).
 * - By backend: sandboxes held and paused (`update`).
 */
export class Commitments {
  private requestedCpu = 0;
  private requestedMiB = 0;
  /** Creates under way: admitted, not yet held. */
  private making = 0;
  private readonly relief = new Map<string, Relief>();
  private reliefCpu = 0;
  private reliefMiB = 0;
  /** The backend of each sandbox held, and those of them paused. */
  private readonly backendOf = new Map<string, string>();
  private readonly pausedIds = new Set<string>();
  private readonly byBackendCount = new Map<string, { sandboxes: number; paused: number }>();

  /** A create admitted: its request counts from now on, and it counts as a sandbox until `made`. */
  reserve(r: Resources): void {
    this.requestedCpu += r.cpu;
    this.requestedMiB += memoryRequestOf(r);
    this.making++;
  }

  /** A create over, held (`update` with its Live follows) or failed (`release` follows). */
  made(): void {
    this.making--;
  }

  /** A sandbox taken back after a restart: its request counts. */
  hold(r: Resources): void {
    this.requestedCpu += r.cpu;
    this.requestedMiB += memoryRequestOf(r);
  }

  /** A sandbox gone, or a create failed: its request no longer counts. */
  release(r: Resources): void {
    this.requestedCpu -= r.cpu;
    this.requestedMiB -= memoryRequestOf(r);
  }

  /** Counts one sandbox again as it is now (`l` undefined: it is gone). */
  update(id: string, l: Live | undefined): void {
    const old = this.relief.get(id);
    if (old) {
      this.reliefCpu -= old.cpu;
      this.reliefMiB -= old.memoryMiB;
      this.relief.delete(id);
    }
    this.count(id, l);
    if (!l || !l.spec.paused || l.pausing || l.reclaim) return;
    const request = memoryRequestOf(l.spec.resources);
    const r = { cpu: l.spec.resources.cpu, memoryMiB: request - Math.min(request, Math.ceil(l.residentWhilePaused / 2 ** 20)) };
    this.relief.set(id, r);
    this.reliefCpu += r.cpu;
    this.reliefMiB += r.memoryMiB;
  }

  private count(id: string, l: Live | undefined): void {
    const was = this.backendOf.get(id);
    if (was !== undefined) {
      const c = this.byBackendCount.get(was)!;
      c.sandboxes--;
      if (this.pausedIds.delete(id)) c.paused--;
      this.backendOf.delete(id);
    }
    if (!l) return;
    const name = l.backend.name;
    let c = this.byBackendCount.get(name);
    if (!c) this.byBackendCount.set(name, (c = { sandboxes: 0, paused: 0 }));
    c.sandboxes++;
    this.backendOf.set(id, name);
    if (l.spec.paused) {
      this.pausedIds.add(id);
      c.paused++;
    }
  }

  /** CPUs and memory requests of every sandbox held or being made, paused ones included. */
  requested(): { cpu: number; memoryMiB: number } {
    return { cpu: round6(this.requestedCpu), memoryMiB: this.requestedMiB };
  }

  /** What admission counts: the requests less the paused ones' relief; sandboxes held and being made. */
  committed(): { cpu: number; memoryMiB: number; sandboxes: number; paused: number } {
    return {
      cpu: round6(this.requestedCpu - this.reliefCpu),
      memoryMiB: this.requestedMiB - this.reliefMiB,
      sandboxes: this.backendOf.size + this.making,
      paused: this.relief.size,
    };
  }

  /** Sandboxes held and paused, by backend (each of `names` present, at 0 when it has none). */
  byBackend(names: string[]): Record<string, { sandboxes: number; paused: number }> {
    const out: Record<string, { sandboxes: number; paused: number }> = {};
    for (const n of names) out[n] = { sandboxes: 0, paused: 0 };
    for (const [n, c] of this.byBackendCount) if (c.sandboxes > 0 || n in out) out[n] = { ...c };
    return out;
  }
}

/** Sums of fractional CPUs drift: rounded to a millionth. */
const round6 = (x: number): number => Math.round(x * 1e6) / 1e6;
