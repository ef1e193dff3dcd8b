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

  constructor(private readonly store: Store) {
    this.timer = setInterval(() => this.flush(), 200);
    this.timer.unref();
  }

  record(e: Omit<AuditEntry, 'at'>): void {
    this.pending.push({ at: new Date().toISOString(), ...e });
    if (this.pending.length >= 1000) this.flush();
  }

  flush(): void {
    if (!this.pending.length) return;
    const batch = this.pending;
    this.pending = [];
    this.store.appendAudit(batch);
  }

  list(q: { limit?: number; tenant?: string; sandbox?: string }): AuditEntry[] {
    this.flush();
    return this.store.listAudit({ limit: q.limit ?? 100, tenant: q.tenant, sandbox: q.sandbox });
  }

  close(): void {
    clearInterval(this.timer);
    this.flush();
  }
}
