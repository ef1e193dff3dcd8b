import { memoryRefusal } from './admission.js';
import { nextRelief, type Relief } from './housekeeping.js';
import type { Live } from './live.js';

/** What memory pressure needs of its edge: the sandboxes, the clock, the two ways to free memory. */
export interface MemoryPressureOptions {
  nodeId: string;
  /** MiB kept available; 0: no relief (and no check at create). */
  floorMiB: number;
  live: ReadonlyMap<string, Live>;
  /** Memory available to the node's sandboxes now (MiB): MemAvailable, or less under their parent cgroup's limit. */
  availableMiB(): Promise<number>;
  now(): number;
  /** Real time for how old a reading is (ms; default performance.now: a lifecycle clock a test holds still must not keep one fresh). */
  elapsedMs?: () => number;
  /** Pages a running idle sandbox out where it runs. */
  pageOut(id: string): Promise<void>;
  /** Pauses a sandbox and waits for its page-out. */
  pauseReclaimed(id: string, why: { availableMiB: number; wantMiB: number }): Promise<void>;
  logger?: { warn(msg: string, meta?: unknown): void };
}

/**
 * How long a reading of the memory available stands for the creates after it (ms): a burst's
 * creates check against one reading, each counted on it, rather than each reading the kernel's
 * count in turn; a reading without room for one is taken again at once.
 */
export const READING_FRESH_MS = 100;

/**
 * The node under real memory pressure: when what is available falls under the floor (the sweep
 * asks every second), or a create needs its request on top of it, idle sandboxes are paged out
 * where they run and then the longest-idle ones paused (nextRelief decides each step), never one
 * with a command running and never killing anything. A create is refused, naming memory, only
 * when that cannot make room. One relief at a time: a create's waits for the sweep's and goes on.
 */
export class MemoryPressure {
  private relief: Promise<void> = Promise.resolve();
  /** Requests of creates that passed the check and have not started yet: not in use, but promised. */
  private pendingMiB = 0;
  /**
   * The last reading a create's check took: what was available then (MiB), when (elapsedMs), and
   * the requests counted against it since (those in flight then, and every one admitted after,
   * started or not: counted as used until the next reading).
   */
  private reading: { atMs: number; availableMiB: number; countedMiB: number } | null = null;

  private readonly elapsed: () => number;

  constructor(private readonly o: MemoryPressureOptions) {
    this.elapsed = o.elapsedMs ?? (() => performance.now());
  }

  /** The sweep's relief: back to the floor if under it. */
  run(): Promise<void> {
    if (this.o.floorMiB <= 0) return Promise.resolve();
    return this.serial(() => this.relieve(0).then(() => undefined));
  }

  /**
   * Makes room for a sandbox requesting `requestMiB` (relieving pressure if need be) and holds it
   * until `release`; throws resource_exhausted naming memory when nothing more can be reclaimed.
   */
  async hold(requestMiB: number): Promise<{ release(): void }> {
    if (this.o.floorMiB <= 0) return { release: () => undefined };
    const r = this.reading;
    if (r && this.elapsed() - r.atMs < READING_FRESH_MS && r.availableMiB - r.countedMiB - requestMiB >= this.o.floorMiB) {
      // A burst of creates reads the kernel's count once: a fresh reading with room for this one
      // and all counted against it since.
      r.countedMiB += requestMiB;
      this.pendingMiB += requestMiB;
    } else
      await this.serial(async () => {
        const available = await this.relieve(requestMiB);
        if (available < this.o.floorMiB + requestMiB)
          throw memoryRefusal(this.o.nodeId, {
            availableMiB: available,
            floorMiB: this.o.floorMiB,
            requestMiB,
            paused: [...this.o.live.values()].filter((l) => l.spec.paused).length,
          });
        this.pendingMiB += requestMiB;
        this.reading = { atMs: this.elapsed(), availableMiB: available + this.pendingMiB - requestMiB, countedMiB: this.pendingMiB };
      });
    let held = true;
    return {
      release: () => {
        if (held) this.pendingMiB -= requestMiB;
        held = false;
      },
    };
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.relief.then(fn);
    this.relief = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /** Steps until `extraMiB` more than the floor is available or nothing more can be done; resolves what is available (less what is promised). */
  private async relieve(extraMiB: number): Promise<number> {
    const want = this.o.floorMiB + extraMiB;
    const done: Relief[] = [];
    let available = (await this.o.availableMiB()) - this.pendingMiB;
    for (let step = nextRelief(this.o.live, available, want); step; step = nextRelief(this.o.live, available, want)) {
      const l = this.o.live.get(step.id)!;
      if (step.kind === 'pageOut') {
        l.pagedOutAtMs = this.o.now();
        await this.o.pageOut(step.id).catch((e: unknown) => this.o.logger?.warn('page-out under memory pressure failed', { id: step.id, error: String(e) }));
      } else {
        this.o.logger?.warn('memory pressure: paused the longest-idle sandbox', { id: step.id, availableMiB: Math.floor(available), wantMiB: want });
        const failed = await this.o.pauseReclaimed(step.id, { availableMiB: available, wantMiB: want }).then(
          () => false,
          (e: unknown) => {
            this.o.logger?.warn('pause under memory pressure failed', { id: step.id, error: String(e) });
            return true;
          },
        );
        // One that cannot be paused is not tried again in this relief.
        if (failed) break;
      }
      done.push(step);
      available = (await this.o.availableMiB()) - this.pendingMiB;
    }
    if (done.length)
      this.o.logger?.warn('memory pressure relieved', {
        pagedOut: done.filter((d) => d.kind === 'pageOut').length,
        paused: done.filter((d) => d.kind === 'pause').length,
        availableMiB: Math.floor(available),
        wantMiB: want,
      });
    return available;
  }
}
