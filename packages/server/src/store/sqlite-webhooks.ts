import type Database from 'better-sqlite3';
import type { WebhookStore } from './webhooks.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS webhook_cursors (
  hook TEXT PRIMARY KEY,
  seq INTEGER NOT NULL,
  holder TEXT NOT NULL,
  until INTEGER NOT NULL
);
`;

/** Webhook cursors and claims in the embedded store (its clock is this process's). */
export class SqliteWebhooks implements WebhookStore {
  private readonly s;
  private readonly claimTx;

  constructor(db: Database.Database) {
    db.exec(SCHEMA);
    this.s = {
      insert: db.prepare<[string, number]>("INSERT OR IGNORE INTO webhook_cursors (hook, seq, holder, until) VALUES (?, ?, '', 0)"),
      take: db.prepare<[string, number, string, string, number]>(
        'UPDATE webhook_cursors SET holder = ?, until = ? WHERE hook = ? AND (holder = ? OR until < ?)',
      ),
      advance: db.prepare<[number, number, string, string]>('UPDATE webhook_cursors SET seq = ?, until = ? WHERE hook = ? AND holder = ?'),
      release: db.prepare<[string, string]>('UPDATE webhook_cursors SET until = 0 WHERE hook = ? AND holder = ?'),
      cursor: db.prepare<[string], { seq: number }>('SELECT seq FROM webhook_cursors WHERE hook = ?'),
    };
    this.claimTx = db.transaction((hook: string, holder: string, ttlMs: number, start: number): number | null => {
      const now = Date.now();
      this.s.insert.run(hook, start);
      if (!this.s.take.run(holder, now + ttlMs, hook, holder, now).changes) return null;
      return this.s.cursor.get(hook)?.seq ?? null;
    });
  }

  async claim(hook: string, holder: string, ttlMs: number, start: number): Promise<number | null> {
    return this.claimTx.immediate(hook, holder, ttlMs, start);
  }

  async advance(hook: string, holder: string, seq: number, ttlMs: number): Promise<boolean> {
    return this.s.advance.run(seq, Date.now() + ttlMs, hook, holder).changes > 0;
  }

  async release(hook: string, holder: string): Promise<void> {
    this.s.release.run(hook, holder);
  }

  async cursor(hook: string): Promise<number | null> {
    return this.s.cursor.get(hook)?.seq ?? null;
  }
}
