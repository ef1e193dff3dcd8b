import type { AuditEntry } from '@warren/api';
import type { Store } from '../store/store.js';

/**
 * The audit log of mutating calls: who (key id, tenant), what (method, path, sandbox) and how it
 * ended (status, error code). Entries are written in batches, a transaction every 200 ms, so a
 * hot path (exec, FnCall) pays for a push, not for a write.
 */
export class AuditLog {
  private pending: AuditEntry[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly store: Store,
    private readonly onError?: (e: unknown, entries: number) => void,
  ) {
    this.timer = setInterval(() => void this.flush(), 200);
    this.timer.unref();
  }

  record(e: Omit<AuditEntry, 'at'>): void {
    this.pending.push({ at: new Date().toISOString(), ...e });
    if (this.pending.length >= 1000) void this.flush();
  }

  /** Writes what is pending; a batch the store refuses is reported and dropped, never retried forever. */
  async flush(): Promise<void> {
    if (!this.pending.length) return;
    const batch = this.pending;
    this.pending = [];
    await this.store.appendAudit(batch).catch((e: unknown) => this.onError?.(e, batch.length));
  }

  async list(q: { limit?: number; tenant?: string; sandbox?: string }): Promise<AuditEntry[]> {
    await this.flush();
    return this.store.listAudit({ limit: q.limit ?? 100, tenant: q.tenant, sandbox: q.sandbox });
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }
}
