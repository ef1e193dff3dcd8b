import type pg from 'pg';
import type Database from 'better-sqlite3';
import type { SandboxState } from '@warren/api';
import { LIVE_STATES } from './sqlite-live.js';

/**
 * Which live sandboxes (creating, running, paused) were created from which image (the name a
 * create named, a snapshot's included): what an image's listing counts and its delete checks.
 */
export interface SandboxImageStore {
  /** How many live sandboxes of `tenant` (null: every tenant's) each image has (only those with any), in one query. */
  counts(tenant: string | null): Promise<Map<string, number>>;
  /**
   * The sandboxes of `tenant` (null: every tenant's) created from `image` in one of `states`
   * (default: the live ones): how many, and the ids of the first `sample` of them.
   */
  of(image: string, tenant: string | null, sample: number, states?: SandboxState[]): Promise<{ count: number; ids: string[] }>;
}

/**
 * In PostgreSQL (the image is the record's `doc->>'image'`); live ones by the generated `live`
 * column (pg-schema.ts), which a partial index holds, where no index names the state.
 */
export class PgSandboxImages implements SandboxImageStore {
  constructor(private readonly pool: pg.Pool) {}

  async counts(tenant: string | null): Promise<Map<string, number>> {
    const r = await this.pool.query<{ image: string; n: string }>(
      `SELECT doc->>'image' AS image, count(*) AS n FROM sandboxes WHERE live AND ($1::text IS NULL OR tenant = $1) GROUP BY 1`,
      [tenant],
    );
    return new Map(r.rows.map((x) => [x.image, Number(x.n)]));
  }

  async of(image: string, tenant: string | null, sample: number, states: readonly SandboxState[] = LIVE_STATES): Promise<{ count: number; ids: string[] }> {
    const r = await this.pool.query<{ id: string; n: string }>(
      `SELECT id, count(*) OVER () AS n FROM sandboxes WHERE ${states.every((x) => LIVE_STATES.includes(x)) ? 'live AND ' : ''}state = ANY($4) AND doc->>'image' = $1 AND ($2::text IS NULL OR tenant = $2) ORDER BY id LIMIT $3`,
      [image, tenant, Math.max(1, sample), states],
    );
    return { count: Number(r.rows[0]?.n ?? 0), ids: r.rows.slice(0, sample).map((x) => x.id) };
  }
}

/** In SQLite (the image is the record's `json_extract(doc, '$.image')`). */
export class SqliteSandboxImages implements SandboxImageStore {
  private readonly s;

  constructor(db: Database.Database) {
    this.s = {
      counts: db.prepare<[string | null, string | null], { image: string; n: number }>(
        `SELECT json_extract(doc, '$.image') AS image, count(*) AS n FROM sandboxes INDEXED BY sandboxes_live WHERE live = 1 AND (? IS NULL OR tenant = ?) GROUP BY 1`,
      ),
      of: db.prepare<[string, string, string | null, string | null, number], { id: string; n: number }>(
        `SELECT id, count(*) OVER () AS n FROM sandboxes WHERE state IN (SELECT value FROM json_each(?)) AND json_extract(doc, '$.image') = ?
         AND (? IS NULL OR tenant = ?) ORDER BY id LIMIT ?`,
      ),
      // Live states only: the live ones alone are walked (ended records are kept).
      ofLive: db.prepare<[string, string, string | null, string | null, number], { id: string; n: number }>(
        `SELECT id, count(*) OVER () AS n FROM sandboxes INDEXED BY sandboxes_live WHERE live = 1 AND state IN (SELECT value FROM json_each(?))
         AND json_extract(doc, '$.image') = ? AND (? IS NULL OR tenant = ?) ORDER BY id LIMIT ?`,
      ),
    };
  }

  async counts(tenant: string | null): Promise<Map<string, number>> {
    return new Map(this.s.counts.all(tenant, tenant).map((x) => [x.image, x.n]));
  }

  async of(image: string, tenant: string | null, sample: number, states: readonly SandboxState[] = LIVE_STATES): Promise<{ count: number; ids: string[] }> {
    const q = states.every((x) => LIVE_STATES.includes(x)) ? this.s.ofLive : this.s.of;
    const rows = q.all(JSON.stringify(states), image, tenant, tenant, Math.max(1, sample));
    return { count: rows[0]?.n ?? 0, ids: rows.slice(0, sample).map((x) => x.id) };
  }
}
