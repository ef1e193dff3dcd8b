import type Database from 'better-sqlite3';
import type { LeaseState } from '@warren/api';
import { MAX_LEASES_LISTED, leaseFromRow, type LeaseRecord, type LeaseRow, type LeaseStore } from './leases.js';

export const LEASES_SCHEMA = `
CREATE TABLE IF NOT EXISTS leases (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  state TEXT NOT NULL,
  ttl_seconds INTEGER NOT NULL,
  on_expiry TEXT NOT NULL,
  labels TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  ended_at INTEGER,
  renewals INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS leases_due ON leases (state, expires_at);
CREATE INDEX IF NOT EXISTS leases_tenant ON leases (tenant, created_at);
`;

/** A sandbox's lease in a column of its own (a partial index: a write of an unleased sandbox pays nothing for it). */
function addLeaseColumn(db: Database.Database): void {
  const cols = db.prepare<[], { name: string }>('PRAGMA table_info(sandboxes)').all();
  if (!cols.some((c) => c.name === 'lease')) {
    db.exec('ALTER TABLE sandboxes ADD COLUMN lease TEXT');
    db.exec("UPDATE sandboxes SET lease = json_extract(doc, '$.lease') WHERE json_extract(doc, '$.lease') IS NOT NULL");
  }
  // By lease and live (no index names the state, which a create's mark writes: see sqlite-live.ts).
  db.exec('DROP INDEX IF EXISTS sandboxes_by_lease');
  db.exec('CREATE INDEX IF NOT EXISTS sandboxes_lease_live ON sandboxes (lease, live) WHERE lease IS NOT NULL');
}

const record = leaseFromRow;

/** Every column, and the time left when read (this process's clock is the store's). */
const COLS = `*, expires_at - CAST(unixepoch('subsec') * 1000 AS INTEGER) AS remaining_ms`;

/** Leases in the embedded store (one process: its clock is the store's). */
export class SqliteLeases implements LeaseStore {
  private readonly s;

  constructor(db: Database.Database) {
    db.exec(LEASES_SCHEMA);
    addLeaseColumn(db);
    this.s = {
      insert: db.prepare<[string, string, number, string, string, number, number], LeaseRow>(
        `INSERT INTO leases (id, tenant, state, ttl_seconds, on_expiry, labels, created_at, expires_at) VALUES (?, ?, 'active', ?, ?, ?, ?, ?) RETURNING ${COLS}`,
      ),
      get: db.prepare<[string], LeaseRow>(`SELECT ${COLS} FROM leases WHERE id = ?`),
      list: db.prepare<[string, string | null, string | null, number], LeaseRow>(
        `SELECT ${COLS} FROM leases WHERE tenant = ? AND (? IS NULL OR state = ?) ORDER BY created_at DESC, id DESC LIMIT ?`,
      ),
      renew: db.prepare<[number, string, string, number], LeaseRow>(
        `UPDATE leases SET expires_at = ?, renewals = renewals + 1 WHERE id = ? AND tenant = ? AND state = 'active' AND expires_at > ? RETURNING ${COLS}`,
      ),
      remove: db.prepare<[number, string, string], LeaseRow>(
        `UPDATE leases SET state = 'deleted', ended_at = ? WHERE id = ? AND tenant = ? AND state = 'active' RETURNING ${COLS}`,
      ),
      lapse: db.prepare<[number, number, number], LeaseRow>(
        `UPDATE leases SET state = 'lapsed', ended_at = ? WHERE id IN (SELECT id FROM leases WHERE state = 'active' AND expires_at <= ? ORDER BY expires_at LIMIT ?) RETURNING ${COLS}`,
      ),
      orphans: db.prepare<[number], { id: string; tenant: string; lease: string }>(
        `SELECT s.id, s.tenant, s.lease FROM sandboxes s JOIN leases l ON l.id = s.lease
         WHERE s.lease IS NOT NULL AND s.live = 1 AND (l.state = 'deleted' OR (l.state = 'lapsed' AND l.on_expiry = 'delete')) LIMIT ?`,
      ),
      nodes: db.prepare<[string], { node: string }>('SELECT DISTINCT node FROM sandboxes WHERE lease = ? AND live = 1'),
    };
  }

  async create(l: Pick<LeaseRecord, 'id' | 'tenant' | 'ttlSeconds' | 'onExpiry' | 'labels'>): Promise<LeaseRecord> {
    const now = Date.now();
    return record(this.s.insert.get(l.id, l.tenant, l.ttlSeconds, l.onExpiry, JSON.stringify(l.labels), now, now + l.ttlSeconds * 1000)!);
  }

  async get(id: string): Promise<LeaseRecord | undefined> {
    const r = this.s.get.get(id);
    return r ? record(r) : undefined;
  }

  async list(tenant: string, state?: LeaseState): Promise<LeaseRecord[]> {
    return this.s.list.all(tenant, state ?? null, state ?? null, MAX_LEASES_LISTED).map(record);
  }

  async renew(id: string, tenant: string, ttlSeconds: number): Promise<LeaseRecord | undefined> {
    const now = Date.now();
    const row = this.s.renew.get(now + ttlSeconds * 1000, id, tenant, now);
    return row ? record(row) : undefined;
  }

  async remove(id: string, tenant: string): Promise<LeaseRecord | undefined> {
    const r = this.s.remove.get(Date.now(), id, tenant) ?? this.s.get.get(id);
    return r && r.tenant === tenant ? record(r) : undefined;
  }

  async lapse(limit: number): Promise<LeaseRecord[]> {
    const now = Date.now();
    return this.s.lapse.all(now, now, limit).map(record);
  }

  async orphans(limit: number): Promise<Array<{ id: string; tenant: string; lease: string }>> {
    return this.s.orphans.all(limit);
  }

  async nodes(id: string): Promise<string[]> {
    return this.s.nodes.all(id).map((r) => r.node);
  }
}
