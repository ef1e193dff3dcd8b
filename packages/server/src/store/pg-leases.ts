import type pg from 'pg';
import type { LeaseState } from '@warren/api';
import { MAX_LEASES_LISTED, leaseFromRow, type LeaseRecord, type LeaseRow, type LeaseStore } from './leases.js';

/** The store's clock (ms): every replica's deadlines are on it. */
const NOW_MS = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
const LIVE = `state IN ('creating', 'running', 'paused')`;

export const PG_LEASES_SCHEMA = `
CREATE TABLE IF NOT EXISTS leases (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  state TEXT NOT NULL,
  ttl_seconds INTEGER NOT NULL,
  on_expiry TEXT NOT NULL,
  labels JSONB NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  ended_at BIGINT,
  renewals INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS leases_due ON leases (state, expires_at);
CREATE INDEX IF NOT EXISTS leases_tenant ON leases (tenant, created_at);
ALTER TABLE sandboxes ADD COLUMN IF NOT EXISTS lease TEXT;
CREATE INDEX IF NOT EXISTS sandboxes_of_lease ON sandboxes (lease) WHERE lease IS NOT NULL;
DROP INDEX IF EXISTS sandboxes_by_lease;
`;

const record = leaseFromRow;

/** Every column, and the time left by the database's clock when read. */
const COLS = `*, expires_at - ${NOW_MS} AS remaining_ms`;

/** Leases in PostgreSQL: every deadline set and checked by the database's clock, so replicas agree. */
export class PgLeases implements LeaseStore {
  constructor(private readonly pool: pg.Pool) {}

  private async rows(sql: string, args: unknown[]): Promise<LeaseRecord[]> {
    return (await this.pool.query<LeaseRow>(sql, args)).rows.map(record);
  }

  async create(l: Pick<LeaseRecord, 'id' | 'tenant' | 'ttlSeconds' | 'onExpiry' | 'labels'>): Promise<LeaseRecord> {
    const [r] = await this.rows(
      // One reading of the clock: its deadline is exactly its TTL after it was made.
      `INSERT INTO leases (id, tenant, state, ttl_seconds, on_expiry, labels, created_at, expires_at)
       SELECT $1, $2, 'active', $3::int, $4, $5, n.now, n.now + $3::int * 1000 FROM (SELECT ${NOW_MS} AS now) n RETURNING ${COLS}`,
      [l.id, l.tenant, l.ttlSeconds, l.onExpiry, JSON.stringify(l.labels)],
    );
    return r!;
  }

  async get(id: string): Promise<LeaseRecord | undefined> {
    return (await this.rows(`SELECT ${COLS} FROM leases WHERE id = $1`, [id]))[0];
  }

  async list(tenant: string, state?: LeaseState): Promise<LeaseRecord[]> {
    return this.rows(`SELECT ${COLS} FROM leases WHERE tenant = $1 AND ($2::text IS NULL OR state = $2) ORDER BY created_at DESC, id DESC LIMIT $3`, [
      tenant,
      state ?? null,
      MAX_LEASES_LISTED,
    ]);
  }

  async renew(id: string, tenant: string, ttlSeconds: number): Promise<LeaseRecord | undefined> {
    const sql = `UPDATE leases SET expires_at = ${NOW_MS} + $3::int * 1000, renewals = renewals + 1
                 WHERE id = $1 AND tenant = $2 AND state = 'active' AND expires_at > ${NOW_MS} RETURNING ${COLS}`;
    return (await this.rows(sql, [id, tenant, ttlSeconds]))[0];
  }

  async remove(id: string, tenant: string): Promise<LeaseRecord | undefined> {
    const done = await this.rows(
      `UPDATE leases SET state = 'deleted', ended_at = ${NOW_MS} WHERE id = $1 AND tenant = $2 AND state = 'active' RETURNING ${COLS}`,
      [id, tenant],
    );
    // Not active: read anew (a statement of its own sees a lapse committed meanwhile).
    return done[0] ?? (await this.rows(`SELECT ${COLS} FROM leases WHERE id = $1 AND tenant = $2`, [id, tenant]))[0];
  }

  async lapse(limit: number): Promise<LeaseRecord[]> {
    // SKIP LOCKED: replicas sweeping at once each take their own, and no lease twice.
    return this.rows(
      `UPDATE leases SET state = 'lapsed', ended_at = ${NOW_MS}
       WHERE id IN (SELECT id FROM leases WHERE state = 'active' AND expires_at <= (SELECT ${NOW_MS}) ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
       RETURNING ${COLS}`,
      [limit],
    );
  }

  async orphans(limit: number): Promise<Array<{ id: string; tenant: string; lease: string }>> {
    const r = await this.pool.query<{ id: string; tenant: string; lease: string }>(
      `SELECT s.id, s.tenant, s.lease FROM sandboxes s JOIN leases l ON l.id = s.lease
       WHERE s.lease IS NOT NULL AND s.${LIVE} AND (l.state = 'deleted' OR (l.state = 'lapsed' AND l.on_expiry = 'delete')) LIMIT $1`,
      [limit],
    );
    return r.rows;
  }

  async nodes(id: string): Promise<string[]> {
    const r = await this.pool.query<{ node: string }>(`SELECT DISTINCT node FROM sandboxes WHERE lease = $1 AND ${LIVE}`, [id]);
    return r.rows.map((x) => x.node);
  }
}
