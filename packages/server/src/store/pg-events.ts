import type pg from 'pg';
import type { EventRecord, EventStore } from './events.js';

const NOW_MS = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

export const PG_EVENTS_SCHEMA = `
CREATE TABLE IF NOT EXISTS events (
  seq BIGSERIAL PRIMARY KEY,
  tenant TEXT NOT NULL,
  at BIGINT NOT NULL,
  type TEXT NOT NULL,
  data JSONB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_tenant ON events (tenant, seq);
CREATE INDEX IF NOT EXISTS events_at ON events (at);
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'events' AND column_name = 'sandbox') THEN
    ALTER TABLE events ADD COLUMN sandbox TEXT;
    UPDATE events SET sandbox = data->>'sandbox';
  END IF;
END $$;
CREATE INDEX IF NOT EXISTS events_sandbox ON events (sandbox, seq);
`;

type Row = { seq: string; tenant: string; at: string; type: string; data: Record<string, unknown> };
const record = (x: Row): EventRecord => ({ seq: Number(x.seq), tenant: x.tenant, at: Number(x.at), type: x.type, data: x.data });

/** Lifecycle events in PostgreSQL. */
export class PgEvents implements EventStore {
  constructor(private readonly pool: pg.Pool) {}

  async append(events: Array<Omit<EventRecord, 'seq' | 'at'>>): Promise<void> {
    if (!events.length) return;
    // Prepared once a connection (named): each create appends, and planning cost more than running it.
    await this.pool.query({
      name: 'events-append',
      text: `INSERT INTO events (tenant, at, type, data, sandbox) SELECT e->>'tenant', ${NOW_MS}, e->>'type', e->'data', e->'data'->>'sandbox' FROM jsonb_array_elements($1::jsonb) AS e`,
      values: [JSON.stringify(events)],
    });
  }

  async after(tenant: string | null, seq: number, limit: number, settledMs = 0): Promise<EventRecord[]> {
    const r = await this.pool.query<Row>(
      `SELECT seq, tenant, at, type, data FROM events WHERE ($1::text IS NULL OR tenant = $1) AND seq > $2 AND at <= (SELECT ${NOW_MS}) - $4 ORDER BY seq LIMIT $3`,
      [tenant, seq, limit, settledMs],
    );
    return r.rows.map(record);
  }

  async ofSandbox(tenant: string, sandbox: string, seq: number, limit: number): Promise<EventRecord[]> {
    const r = await this.pool.query<Row>(
      'SELECT seq, tenant, at, type, data FROM events WHERE sandbox = $1 AND tenant = $2 AND seq > $3 ORDER BY seq LIMIT $4',
      [sandbox, tenant, seq, limit],
    );
    return r.rows.map(record);
  }

  async first(): Promise<number> {
    const r = await this.pool.query<{ seq: string | null }>('SELECT min(seq) AS seq FROM events');
    return Number(r.rows[0]?.seq ?? 0);
  }

  async last(): Promise<number> {
    const r = await this.pool.query<{ seq: string | null }>('SELECT max(seq) AS seq FROM events');
    return Number(r.rows[0]?.seq ?? 0);
  }

  async prune(ms: number): Promise<number> {
    const r = await this.pool.query(`DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE at < (SELECT ${NOW_MS}) - $1 ORDER BY seq LIMIT 5000)`, [
      ms,
    ]);
    return r.rowCount ?? 0;
  }
}
