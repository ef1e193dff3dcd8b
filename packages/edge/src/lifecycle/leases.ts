/**
 * A lease as a node keeps it: the sandboxes made with it are frozen (paused) on the node once
 * `expiresAtMs` passes, whether or not the control plane is reachable then. The control plane
 * decides the rest (removing them when the lease says delete).
 */
export interface EdgeLease {
  id: string;
  /** Its renewals so far: of two views of one lease, the one with more is the truer. */
  generation: number;
  /** When it lapses (the caller's wall clock, moved to the node's on the way). */
  expiresAtMs: number;
  onExpiry: 'delete' | 'pause';
  /** Lapsed or deleted in the control plane's store: its sandboxes are frozen now. */
  ended?: boolean;
}

/** The most leases a node keeps (each held by a sandbox of its, or told by the control plane). */
export const MAX_EDGE_LEASES = 100_000;

interface Kept {
  lease: EdgeLease;
  timer: NodeJS.Timeout | null;
  /** Its sandboxes were frozen (once: a sandbox resumed by its owner later stays running). */
  lapsed: boolean;
}

/**
 * The node's leases: one timer each at its deadline (so a lapse freezes within milliseconds,
 * not at the next sweep), and the sweep checks them too (an injected clock has no timers).
 */
export class EdgeLeases {
  private readonly kept = new Map<string, Kept>();

  constructor(
    private readonly o: {
      now(): number;
      /** Freezes the sandboxes that hold the lease. */
      lapse(id: string): void;
    },
  ) {}

  /** Learns a lease (with a sandbox's spec, or told by the control plane): kept when it is newer than what is known. */
  learn(l: EdgeLease): void {
    const k = this.kept.get(l.id);
    // Older news, or the same (an end is news of the same generation).
    if (k && (l.generation < k.lease.generation || (l.generation === k.lease.generation && !(l.ended && !k.lease.ended)))) return;
    if (!k && this.kept.size >= MAX_EDGE_LEASES) return;
    if (k?.timer) clearTimeout(k.timer);
    const next: Kept = { lease: { ...l }, timer: null, lapsed: k?.lapsed ?? false };
    this.kept.set(l.id, next);
    this.arm(next);
  }

  /** The lease of this id as known here. */
  get(id: string): EdgeLease | undefined {
    return this.kept.get(id)?.lease;
  }

  /** Forgets leases no sandbox here holds any more (`held`: the ids still held). */
  prune(held: ReadonlySet<string>): void {
    for (const [id, k] of this.kept) {
      if (held.has(id)) continue;
      if (k.timer) clearTimeout(k.timer);
      this.kept.delete(id);
    }
  }

  /** Lapses what is due at `now` (the sweep's check, and each timer's). */
  check(now = this.o.now()): void {
    for (const [id, k] of this.kept) {
      if (k.lapsed || (!k.lease.ended && now < k.lease.expiresAtMs)) continue;
      k.lapsed = true;
      if (k.timer) clearTimeout(k.timer);
      k.timer = null;
      this.o.lapse(id);
    }
  }

  /** Whether a lease known here has lapsed (a create or claim with it is refused). */
  lapsed(id: string, now = this.o.now()): boolean {
    const k = this.kept.get(id);
    return !!k && (k.lapsed || !!k.lease.ended || now >= k.lease.expiresAtMs);
  }

  close(): void {
    for (const k of this.kept.values()) if (k.timer) clearTimeout(k.timer);
    this.kept.clear();
  }

  private arm(k: Kept): void {
    if (k.lapsed) return;
    const inMs = k.lease.ended ? 0 : k.lease.expiresAtMs - this.o.now();
    // A timer is at most ~24.8 days; the sweep catches a lease further off when it comes near.
    if (inMs > 2 ** 31 - 1) return;
    k.timer = setTimeout(() => this.check(), Math.max(0, inMs));
    k.timer.unref();
  }
}
