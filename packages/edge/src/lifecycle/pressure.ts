import { totalmem } from 'node:os';
import { defaultMemoryFloorMiB, longestIdleFirst } from './housekeeping.js';
import { memAvailableMiB, type Live } from './live.js';

/**
 * When the node's available memory falls under its floor, pauses the longest-idle running
 * sandboxes (no command running) one by one until it is back above: their memory goes to swap
 * or is dropped, instead of the kernel OOM-killing something. One relief at a time.
 */
export class PressureRelief {
  private relieving = false;

  constructor(
    private readonly o: {
      /** MiB; undefined: the default floor; 0: off. */
      floorMiB?: number;
      live: ReadonlyMap<string, Live>;
      /** Pauses a sandbox and waits for its memory to be given back. */
      pauseReclaimed(id: string): Promise<void>;
      logger?: { warn(msg: string, meta?: unknown): void };
    },
  ) {}

  async run(): Promise<void> {
    const floor = this.o.floorMiB ?? defaultMemoryFloorMiB(totalmem());
    if (this.relieving || floor <= 0) return;
    this.relieving = true;
    try {
      let avail = await memAvailableMiB();
      if (avail >= floor) return;
      let paused = 0;
      for (const id of longestIdleFirst(this.o.live)) {
        if (avail >= floor) break;
        await this.o.pauseReclaimed(id).catch(() => undefined);
        paused++;
        avail = await memAvailableMiB();
      }
      if (paused > 0) this.o.logger?.warn('memory pressure: paused the longest-idle sandboxes', { paused, availableMiB: avail, floorMiB: floor });
    } finally {
      this.relieving = false;
    }
  }
}
