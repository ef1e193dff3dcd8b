import { WarrenError, memoryRequestOf } from '@warren/api';

export interface EdgeCapacity {
  /**
   * A safety bound on the CPU limits of running sandboxes together (a CPU limit is a cap, not a
   * reservation: admission counts what the node really uses, see busyCpu).
   */
  cpu: number;
  /**
   * Cores the node's sandboxes may use together, measured over the last ~10 s, before a create
   * is refused (the node is really busy). Absent: no such check.
   */
  busyCpu?: number;
  /**
   * Memory requests the node's sandboxes may commit together: its memory plus what its
   * compressed swap can hold beyond its own footprint (committableMemoryMiB).
   */
  memoryMiB: number;
  sandboxes: number;
  /** The most one sandbox may ask for. */
  maxCpuPerSandbox: number;
  maxMemoryMiBPerSandbox: number;
  /**
   * The most disk one sandbox may ask for (absent: no limit): disk is thin-provisioned, and no
   * single sandbox may be able to fill the file system its neighbours write to.
   */
  maxDiskMiBPerSandbox?: number;
}

export interface AdmissionRequest {
  cpu: number;
  /** The sandbox's hard limit (checked against the most one sandbox may have). */
  memoryMiB: number;
  /** What it commits (absent: the default share of memoryMiB, memoryRequestOf). */
  memoryRequestMiB?: number;
  diskMiB?: number | null;
}

/** What admission counts of the node now (see Edge.usage), and the CPU its sandboxes really use. */
export interface AdmissionState {
  cpu: number;
  /** Memory requests committed (running sandboxes', and what paused ones keep resident). */
  memoryMiB: number;
  sandboxes: number;
  paused: number;
  /** Cores the sandboxes used lately (CpuLoad). */
  cpuUsed: number;
}

/**
 * Whether a node can take a sandbox: by what cannot be shared (committed memory, the sandbox
 * count, one sandbox's disk) and by the CPU its sandboxes really use, with a generous bound on
 * the sum of CPU limits. Throws resource_exhausted naming the resource; pure.
 */
export function checkAdmission(node: string, c: EdgeCapacity, s: AdmissionState, r: AdmissionRequest): void {
  const refusal = admissionRefusal(node, c, s, r);
  if (refusal) throw refusal;
}

/** checkAdmission's answer without a throw: null when the node can take it (the placement of many creates asks often). */
export function admissionRefusal(node: string, c: EdgeCapacity, s: AdmissionState, r: AdmissionRequest): WarrenError | null {
  if (r.cpu > c.maxCpuPerSandbox || r.memoryMiB > c.maxMemoryMiBPerSandbox) {
    return new WarrenError('resource_exhausted', `a sandbox on this node may have at most ${c.maxCpuPerSandbox} CPUs and ${c.maxMemoryMiBPerSandbox} MiB`, {
      requested: r,
      limit: { cpu: c.maxCpuPerSandbox, memoryMiB: c.maxMemoryMiBPerSandbox },
    });
  }
  if (c.maxDiskMiBPerSandbox !== undefined && (r.diskMiB ?? 0) > c.maxDiskMiBPerSandbox) {
    return new WarrenError('resource_exhausted', `a sandbox on this node may have at most ${c.maxDiskMiBPerSandbox} MiB of disk`, {
      requested: r,
      limit: { diskMiB: c.maxDiskMiBPerSandbox },
    });
  }
  const full = (resource: string, why: string): WarrenError =>
    new WarrenError('resource_exhausted', `this node is full: ${why}`, {
      node,
      resource,
      allocated: { cpu: s.cpu, memoryMiB: s.memoryMiB, sandboxes: s.sandboxes, paused: s.paused },
      used: { cpu: round2(s.cpuUsed) },
      capacity: { cpu: c.cpu, busyCpu: c.busyCpu ?? null, memoryMiB: c.memoryMiB, sandboxes: c.sandboxes },
    });
  if (s.sandboxes + 1 > c.sandboxes) return full('sandboxes', `it holds ${s.sandboxes} sandboxes, its most`);
  const request = memoryRequestOf(r);
  if (s.memoryMiB + request > c.memoryMiB)
    return full('memory', `${s.memoryMiB} of ${c.memoryMiB} MiB of memory requests are committed, and this sandbox requests ${request} MiB`);
  if (c.busyCpu !== undefined && s.cpuUsed > c.busyCpu) return full('cpu', `its sandboxes use ${round2(s.cpuUsed)} cores, more than ${c.busyCpu}`);
  if (s.cpu + r.cpu > c.cpu) return full('cpuLimits', `its running sandboxes' CPU limits add up to ${s.cpu}, and at most ${c.cpu} may`);
  return null;
}

const round2 = (x: number): number => Math.round(x * 100) / 100;

/**
 * The refusal of a create when the node really is short of memory and nothing more can be
 * reclaimed: its idle sandboxes are paged out and paused already, and what is available is
 * still under the floor it keeps plus what the sandbox requests. Pure.
 */
export function memoryRefusal(node: string, m: { availableMiB: number; floorMiB: number; requestMiB: number; paused: number }): WarrenError {
  const available = Math.floor(m.availableMiB);
  return new WarrenError(
    'resource_exhausted',
    `this node is out of memory: ${available} MiB are available, it keeps ${m.floorMiB} MiB free and this sandbox requests ${m.requestMiB} MiB; its idle sandboxes are paged out and paused (${m.paused}) already`,
    { node, resource: 'memory', availableMiB: available, floorMiB: m.floorMiB, requestedMiB: m.requestMiB, paused: m.paused },
  );
}

/**
 * Memory requests a node may commit: its memory, plus what its compressed swap holds beyond the
 * memory the compressed pages take themselves (`zramMiB` of pages at `ratio` : 1 take zramMiB /
 * ratio of memory). With `overcommit`, the operator's word instead: the memory × it. Pure.
 */
export function committableMemoryMiB(o: { memoryMiB: number; zramMiB: number; ratio?: number; overcommit?: number }): number {
  if (o.overcommit !== undefined) return Math.floor(o.memoryMiB * o.overcommit);
  const ratio = o.ratio ?? ZRAM_ASSUMED_RATIO;
  return Math.floor(o.memoryMiB + Math.max(0, o.zramMiB) * (1 - 1 / ratio));
}

/**
 * The compression ratio admission assumes for zram: 2 : 1, under what lz4 measures for idle
 * interpreters' heaps (about 3 : 1, see host/swap.ts) and far under a zeroed or repeated
 * buffer's, so a node whose sandboxes hold less compressible data is not promised too much.
 */
export const ZRAM_ASSUMED_RATIO = 2;

/**
 * The cores a set of cgroups used lately: samples of their total CPU seconds, at least a second
 * apart, smoothed with a time constant of `windowMs` (so a burst shows within seconds and a
 * quiet node reads near zero soon after). The clock is injected.
 */
export class CpuLoad {
  private last: { atMs: number; seconds: number } | null = null;
  private rate = 0;
  private smoothed = 0;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly windowMs = 10_000,
  ) {}

  /** Takes a sample of the total CPU seconds used so far. */
  sample(seconds: number): void {
    const at = this.now();
    const prev = this.last;
    if (!prev) {
      this.last = { atMs: at, seconds };
      return;
    }
    const dt = at - prev.atMs;
    if (dt < 1000) return;
    this.rate = Math.max(0, (seconds - prev.seconds) / (dt / 1000));
    this.smoothed += (this.rate - this.smoothed) * (1 - Math.exp(-dt / this.windowMs));
    this.last = { atMs: at, seconds };
  }

  /** Cores used between the last two samples. */
  get recent(): number {
    return this.rate;
  }

  /** Cores used over the window. */
  get cores(): number {
    return this.smoothed;
  }
}
