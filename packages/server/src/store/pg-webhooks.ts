import type pg from 'pg';
import type { WebhookStore } from './webhooks.js';

/** The store's clock (ms): every replica's claim deadlines are on it. */
const NOW_MS = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

export const PG_WEBHOOKS_SCHEMA = `
CREATE TABLE IF NOT EXISTS webhook_cursors (
  hook TEXT PRIMARY KEY,
  seq BIGINT NOT NULL,
  holder TEXT NOT NULL,
  until BIGINT NOT NULL
);
`;

/** Webhook cursors and claims in PostgreSQL: one statement each, so two replicas' claims of a hook serialize on its row. */
export class PgWebhooks implements WebhookStore {
  constructor(private readonly pool: pg.Pool) {}

  async claim(hook: string, holder: string, ttlMs: number, start: number): Promise<number | null> {
    // ON CONFLICT … WHERE sees the row as the other claim left it (it waits for that one's lock).
    const r = await this.pool.query<{ seq: string }>(
      `INSERT INTO webhook_cursors AS w (hook, seq, holder, until) VALUES ($1, $2, $3, ${NOW_MS} + $4)
       ON CONFLICT (hook) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
       WHERE w.holder = EXCLUDED.holder OR w.until < ${NOW_MS}
       RETURNING seq`,
      [hook, start, holder, ttlMs],
    );
    const row = r.rows[0];
    return row ? Number(row.seq) : null;
  }

  async advance(hook: string, holder: string, seq: number, ttlMs: number): Promise<boolean> {
    const r = await this.pool.query(`UPDATE webhook_cursors SET seq = $1, until = ${NOW_MS} + $2 WHERE hook = $3 AND holder = $4`, [seq, ttlMs, hook, holder]);
    return (r.rowCount ?? 0) > 0;
  }

  async release(hook: string, holder: string): Promise<void> {
    await this.pool.query('UPDATE webhook_cursors SET until = 0 WHERE hook = $1 AND holder = $2', [hook, holder]);
  }

  async cursor(hook: string): Promise<number | null> {
    const r = await this.pool.query<{ seq: string }>('SELECT seq FROM webhook_cursors WHERE hook = $1', [hook]);
    const row = r.rows[0];
    return row ? Number(row.seq) : null;
  }
}
