import { WarrenError } from '@warren/api';

/** Whether an error says the cluster (not the caller's quota) has no room now. */
export function isCapacityError(e: unknown): boolean {
  return e instanceof WarrenError && e.code === 'resource_exhausted' && ('nodes' in e.details || 'node' in e.details) && !('quota' in e.details);
}

interface Waiter {
  tenant: string;
  deadline: number;
  attempt: () => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  timer: NodeJS.Timeout;
}

export interface CapacityQueueOptions {
  /** Creates one tenant may have waiting at once (default 10,000); past it a create answers at once. */
  maxPerTenant?: number;
  /** How often the queue tries again when nothing told it that room freed up (ms; default 1000). */
  retryMs?: number;
}

/**
 * Creates that wait for room (`schedule.waitSeconds`) instead of failing at once while the
 * cluster is full: one queue per tenant, served round robin (a tenant with thousands waiting
 * does not hold back one with a few), each tried again, oldest first, when room may have freed
 * up (a sandbox ended or paused here, a node joined; and every `retryMs`, for what other replicas
 * and nodes freed). A create that finds no room goes back to the head of its tenant's queue and
 * the round ends; one whose time runs out answers resource_exhausted.
 */
export class CapacityQueue {
  private readonly queues = new Map<string, Waiter[]>();
  private running = false;
  private again = false;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly o: CapacityQueueOptions = {}) {
    this.timer = setInterval(() => this.poke(), o.retryMs ?? 1000);
    this.timer.unref();
  }

  /** How many creates wait (for /metrics and tests). */
  get waiting(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  /** Runs `attempt`; while it fails for want of room, waits in the tenant's queue for up to `waitMs`. */
  async run<T>(tenant: string, waitMs: number, attempt: () => Promise<T>): Promise<T> {
    try {
      return await attempt();
    } catch (e) {
      if (!isCapacityError(e) || waitMs <= 0) throw e;
      const q = this.queues.get(tenant) ?? [];
      if (q.length >= (this.o.maxPerTenant ?? 10_000))
        throw new WarrenError('resource_exhausted', `tenant "${tenant}" has ${q.length} creates waiting for room already, its most`, {
          tenant,
          waiting: q.length,
        });
      this.queues.set(tenant, q);
      return new Promise<T>((resolve, reject) => {
        const w: Waiter = {
          tenant,
          deadline: Date.now() + waitMs,
          attempt,
          resolve: resolve as (v: unknown) => void,
          reject,
          timer: setTimeout(() => {
            if (!this.drop(w)) return;
            const err = e as WarrenError;
            reject(
              new WarrenError('resource_exhausted', `no room for the sandbox within ${Math.round(waitMs / 1000)} s`, { ...err.details, waitedMs: waitMs }),
            );
          }, waitMs),
        };
        q.push(w);
      });
    }
  }

  /** Room may have freed up: the waiting creates are tried, round robin over tenants. */
  poke(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    if (!this.waiting) return;
    this.running = true;
    void this.serve().finally(() => {
      this.running = false;
      if (this.again) {
        this.again = false;
        this.poke();
      }
    });
  }

  private async serve(): Promise<void> {
    for (;;) {
      let placed = false;
      for (const tenant of [...this.queues.keys()]) {
        const w = this.queues.get(tenant)?.[0];
        if (!w) continue;
        const ok = await w.attempt().then(
          (v) => {
            if (this.drop(w)) w.resolve(v);
            return true;
          },
          (e: unknown) => {
            if (isCapacityError(e)) return false;
            if (this.drop(w)) w.reject(e);
            return true;
          },
        );
        // No room for this one: none for the rest this round either (they ask the same cluster).
        if (!ok) return;
        placed = true;
        // Served: its tenant goes behind the others.
        const q = this.queues.get(tenant);
        if (q) {
          this.queues.delete(tenant);
          this.queues.set(tenant, q);
        }
      }
      if (!placed) return;
    }
  }

  /** Takes a waiter out of its queue; false if it was gone already (answered or timed out). */
  private drop(w: Waiter): boolean {
    const q = this.queues.get(w.tenant);
    const i = q?.indexOf(w) ?? -1;
    if (!q || i < 0) return false;
    q.splice(i, 1);
    clearTimeout(w.timer);
    if (!q.length) this.queues.delete(w.tenant);
    return true;
  }

  close(): void {
    clearInterval(this.timer);
    for (const q of [...this.queues.values()])
      for (const w of [...q]) if (this.drop(w)) w.reject(new WarrenError('unavailable', 'the control plane is stopping'));
  }
}
