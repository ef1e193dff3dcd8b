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

/** Whether `l` is a lease as the control plane sends one (what comes over the edge protocol is checked). */
export function isEdgeLease(l: unknown): l is EdgeLease {
  const x = l as Partial<EdgeLease> | null;
  return (
    typeof x === 'object' &&
    x !== null &&
    typeof x.id === 'string' &&
    x.id.length > 0 &&
    x.id.length <= 64 &&
    Number.isSafeInteger(x.generation) &&
    Number.isFinite(x.expiresAtMs) &&
    (x.onExpiry === 'delete' || x.onExpiry === 'pause') &&
    (x.ended === undefined || typeof x.ended === 'boolean')
  );
}

/** What the leases need of their node. */
export interface LeaseHost {
  now(): number;
  /** The live sandboxes that hold a lease, and whether each is paused now. */
  holders(lease: string): Array<{ id: string; paused: boolean }>;
  /** Freezes a sandbox (its memory paged out when `reclaim`). */
  freeze(id: string, reclaim: boolean): Promise<void>;
  /** Thaws one the lease froze (a renewal came after the node's deadline, but in time for the store). */
  thaw(id: string): Promise<void>;
  logger?: { warn(msg: string, meta?: unknown): void };
}

interface Kept {
  lease: EdgeLease;
  timer: NodeJS.Timeout | null;
  /** Its sandboxes were frozen for it (once: a sandbox its owner resumes later stays running). */
  lapsed: boolean;
  /** The sandboxes its lapse froze (thawed again if a renewal turns out to have been in time). */
  froze: Set<string>;
}

/**
 * The node's leases: one timer each at its deadline (so a lapse freezes within milliseconds,
 * not at the next sweep), and the sweep checks them too (an injected clock has no timers).
 */
export class EdgeLeases {
  private readonly kept = new Map<string, Kept>();

  constructor(private readonly host: LeaseHost) {}

  /**
   * Learns a lease (with a sandbox's spec, or told by the control plane): kept when it is newer
   * than what is known, refused (false) when the node keeps too many. A renewal newer than a
   * lapse the node made on its own deadline (a late one the store took in time) thaws what the
   * lapse froze.
   */
  learn(l: EdgeLease): boolean {
    const k = this.kept.get(l.id);
    // Older news, or the same (an end is news of the same generation).
    if (k && (l.generation < k.lease.generation || (l.generation === k.lease.generation && !(l.ended && !k.lease.ended)))) return true;
    if (!k && this.kept.size >= MAX_EDGE_LEASES) return false;
    if (k?.timer) clearTimeout(k.timer);
    const next: Kept = { lease: { ...l }, timer: null, lapsed: k?.lapsed ?? false, froze: k?.froze ?? new Set() };
    this.kept.set(l.id, next);
    if (next.lapsed && !l.ended && l.expiresAtMs > this.host.now()) this.revive(next);
    this.arm(next);
    return true;
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

  /** Lapses what is due at `now`: the sweep's check. */
  check(now = this.host.now()): void {
    for (const k of this.kept.values()) this.due(k, now);
  }

  /** Whether a lease known here has lapsed or ended (a sandbox made or taken with it is frozen at once). */
  lapsed(id: string, now = this.host.now()): boolean {
    const k = this.kept.get(id);
    return !!k && (k.lapsed || !!k.lease.ended || now >= k.lease.expiresAtMs);
  }

  /** A sandbox made or taken with a lease that lapsed: frozen as the lapse froze the others. */
  freezeLate(lease: string, id: string): void {
    const k = this.kept.get(lease);
    if (k) this.freezeOne(k, id);
  }

  close(): void {
    for (const k of this.kept.values()) if (k.timer) clearTimeout(k.timer);
    this.kept.clear();
  }

  private due(k: Kept, now: number): void {
    if (k.lapsed || (!k.lease.ended && now < k.lease.expiresAtMs)) return;
    k.lapsed = true;
    if (k.timer) clearTimeout(k.timer);
    k.timer = null;
    for (const h of this.host.holders(k.lease.id)) if (!h.paused) this.freezeOne(k, h.id);
  }

  private freezeOne(k: Kept, id: string): void {
    this.host.freeze(id, k.lease.onExpiry === 'pause').then(
      () => k.froze.add(id),
      (e: unknown) => {
        // Tried again at the next sweep.
        k.lapsed = false;
        this.host.logger?.warn('a lapsed lease’s sandbox could not be frozen', { lease: k.lease.id, id, error: String(e) });
      },
    );
  }

  private revive(k: Kept): void {
    k.lapsed = false;
    for (const id of k.froze) this.host.thaw(id).catch(() => undefined);
    k.froze.clear();
  }

  private arm(k: Kept): void {
    if (k.lapsed) return;
    const inMs = k.lease.ended ? 0 : k.lease.expiresAtMs - this.host.now();
    // A timer is at most ~24.8 days; the sweep catches a lease further off when it comes near.
    if (inMs > 2 ** 31 - 1) return;
    k.timer = setTimeout(
      () => {
        k.timer = null;
        // A timer may fire a millisecond early: armed again for what is left.
        if (!k.lease.ended && this.host.now() < k.lease.expiresAtMs) this.arm(k);
        else this.due(k, this.host.now());
      },
      Math.max(0, inMs),
    );
    k.timer.unref();
  }
}
