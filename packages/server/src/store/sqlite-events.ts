import type Database from 'better-sqlite3';
import type { EventRecord, EventStore } from './events.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant TEXT NOT NULL,
  at INTEGER NOT NULL,
  type TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_tenant ON events (tenant, seq);
CREATE INDEX IF NOT EXISTS events_at ON events (at);
`;

type Row = { seq: number; tenant: string; at: number; type: string; data: string };
const COLS = 'seq, tenant, at, type, data';

/** An event's sandbox in a column of its own (read by sandbox); a store from before it had one gets it filled in. */
function addSandboxColumn(db: Database.Database): void {
  const cols = db.prepare<[], { name: string }>('PRAGMA table_info(events)').all();
  if (!cols.some((c) => c.name === 'sandbox')) {
    db.exec('ALTER TABLE events ADD COLUMN sandbox TEXT');
    db.exec("UPDATE events SET sandbox = json_extract(data, '$.sandbox')");
  }
  db.exec('CREATE INDEX IF NOT EXISTS events_sandbox ON events (sandbox, seq)');
}

/** Lifecycle events in the embedded store. */
export class SqliteEvents implements EventStore {
  private readonly s;
  private readonly appendTx;

  constructor(db: Database.Database) {
    db.exec(SCHEMA);
    addSandboxColumn(db);
    this.s = {
      insert: db.prepare('INSERT INTO events (tenant, at, type, data, sandbox) VALUES (?, ?, ?, ?, ?)'),
      after: db.prepare<[string, number, number, number], Row>(`SELECT ${COLS} FROM events WHERE tenant = ? AND seq > ? AND at <= ? ORDER BY seq LIMIT ?`),
      afterAll: db.prepare<[number, number, number], Row>(`SELECT ${COLS} FROM events WHERE seq > ? AND at <= ? ORDER BY seq LIMIT ?`),
      ofSandbox: db.prepare<[string, string, number, number], Row>(
        `SELECT ${COLS} FROM events WHERE sandbox = ? AND tenant = ? AND seq > ? ORDER BY seq LIMIT ?`,
      ),
      first: db.prepare<[], { seq: number | null }>('SELECT min(seq) AS seq FROM events'),
      last: db.prepare<[], { seq: number | null }>('SELECT max(seq) AS seq FROM events'),
      prune: db.prepare('DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE at < ? ORDER BY seq LIMIT 5000)'),
    };
    // Made once: db.transaction builds a transaction's wrappers at every call (~10 µs).
    const insert = this.s.insert;
    this.appendTx = db.transaction((events: Array<Omit<EventRecord, 'seq' | 'at'>>, at: number) => {
      for (const e of events) insert.run(e.tenant, at, e.type, JSON.stringify(e.data), typeof e.data.sandbox === 'string' ? e.data.sandbox : null);
    });
  }

  async append(events: Array<Omit<EventRecord, 'seq' | 'at'>>): Promise<void> {
    this.appendTx(events, Date.now());
  }

  async after(tenant: string | null, seq: number, limit: number, settledMs = 0): Promise<EventRecord[]> {
    const rows = tenant === null ? this.s.afterAll.all(seq, Date.now() - settledMs, limit) : this.s.after.all(tenant, seq, Date.now() - settledMs, limit);
    return rows.map((r) => ({ ...r, data: JSON.parse(r.data) as Record<string, unknown> }));
  }

  async ofSandbox(tenant: string, sandbox: string, seq: number, limit: number): Promise<EventRecord[]> {
    return this.s.ofSandbox.all(sandbox, tenant, seq, limit).map((r) => ({ ...r, data: JSON.parse(r.data) as Record<string, unknown> }));
  }

  async first(): Promise<number> {
    return this.s.first.get()?.seq ?? 0;
  }

  async last(): Promise<number> {
    return this.s.last.get()?.seq ?? 0;
  }

  async prune(ms: number): Promise<number> {
    return this.s.prune.run(Date.now() - ms).changes;
  }
}
