import type { IdMap } from '@warren/images';

/** Host ids of the sandboxes' ranges start here, clear of the ranges hosts hand their users (/etc/subuid). */
export const SANDBOX_IDS_BASE = 2 ** 30;
export const RANGE_SIZE = 65536;
/** 2^30 + 16384 × 65536 = 2^31: no sandbox id is negative as a signed 32-bit number. */
export const MAX_RANGES = 16384;

/**
 * Host uid/gid ranges, one per sandbox: root in one sandbox is not the same host uid as root in
 * any other, so nothing one sandbox owns (a file, a process, a SysV object in a namespace the
 * kernel shares) is another's to touch. The lowest free range is handed out: a range is given
 * back only once its sandbox's processes and files are gone, and reusing few ranges lets
 * warren-hostd reuse the user namespaces it idmaps layers through (native/spawn.c).
 */
export class IdRanges {
  private readonly used = new Set<number>();
  /** No range below this index is free: a fill of 10,000 does not look at every range each time. */
  private from = 0;

  constructor(private readonly max = MAX_RANGES) {}

  /** The lowest free range; null when none is left. */
  take(): IdMap | null {
    for (let k = this.from; k < this.max; k++) {
      const hostStart = SANDBOX_IDS_BASE + k * RANGE_SIZE;
      if (this.used.has(hostStart)) continue;
      this.used.add(hostStart);
      this.from = k + 1;
      return { hostStart, size: RANGE_SIZE };
    }
    return null;
  }

  /** Marks a range in use that an earlier run handed out (found from what it owns on disk). */
  claim(hostStart: number): void {
    this.used.add(hostStart);
  }

  release(hostStart: number): void {
    this.used.delete(hostStart);
    this.from = Math.min(this.from, Math.max(0, Math.floor((hostStart - SANDBOX_IDS_BASE) / RANGE_SIZE)));
  }

  get inUse(): number {
    return this.used.size;
  }
}
