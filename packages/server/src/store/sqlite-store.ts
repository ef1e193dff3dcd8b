import Database from 'better-sqlite3';
import type { AuditEntry } from '@warren/api';
import type { KeyRecord, ListFilter, PoolRecord, SandboxRecord, Store } from './store.js';

const SCHEMA = `
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  node TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  request_id TEXT,
  doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes (tenant, id);
CREATE INDEX IF NOT EXISTS sandboxes_node ON sandboxes (node, state);
CREATE UNIQUE INDEX IF NOT EXISTS sandboxes_request ON sandboxes (tenant, request_id) WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS sandbox_labels (
  id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (id, key)
);
CREATE INDEX IF NOT EXISTS sandbox_labels_kv ON sandbox_labels (key, value);
CREATE TABLE IF NOT EXISTS exec_requests (
  sandbox_id TEXT NOT NULL,
  request_id TEXT NOT NULL,
  command_id TEXT NOT NULL,
  PRIMARY KEY (sandbox_id, request_id)
);
CREATE TABLE IF NOT EXISTS pools (
  id TEXT PRIMARY KEY,
  doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
  hash TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  role TEXT NOT NULL,
  quota TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  at INTEGER NOT NULL,
  key_id TEXT,
  tenant TEXT,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  sandbox TEXT,
  status INTEGER NOT NULL,
  code TEXT
);
CREATE INDEX IF NOT EXISTS audit_tenant ON audit (tenant, seq);
CREATE INDEX IF NOT EXISTS audit_sandbox ON audit (sandbox, seq);
`;

type Row = { doc: string };
type AuditRow = {
  at: number;
  key_id: string | null;
  tenant: string | null;
  method: string;
  path: string;
  sandbox: string | null;
  status: number;
  code: string | null;
};

/** The embedded store: one SQLite file, WAL mode, every statement prepared once. */
export class SqliteStore implements Store {
  private readonly db: Database.Database;
  private readonly stmts;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('foreign_keys = ON');
    this.db.exec(SCHEMA);
    const db = this.db;
    this.stmts = {
      insert: db.prepare('INSERT INTO sandboxes (id, tenant, node, state, created_at, request_id, doc) VALUES (?, ?, ?, ?, ?, ?, ?)'),
      insertLabel: db.prepare('INSERT INTO sandbox_labels (id, key, value) VALUES (?, ?, ?)'),
      update: db.prepare('UPDATE sandboxes SET state = ?, doc = ? WHERE id = ?'),
      get: db.prepare<[string], Row>('SELECT doc FROM sandboxes WHERE id = ?'),
      byRequest: db.prepare<[string, string], Row>('SELECT doc FROM sandboxes WHERE tenant = ? AND request_id = ?'),
      live: db.prepare<[string], Row>("SELECT doc FROM sandboxes WHERE node = ? AND state IN ('creating', 'running', 'paused')"),
      usage: db.prepare<[string], Row>("SELECT doc FROM sandboxes WHERE tenant = ? AND state IN ('creating', 'running', 'paused')"),
      del: db.prepare('DELETE FROM sandboxes WHERE id = ?'),
      execRequest: db.prepare<[string, string], { command_id: string }>('SELECT command_id FROM exec_requests WHERE sandbox_id = ? AND request_id = ?'),
      putExecRequest: db.prepare('INSERT OR IGNORE INTO exec_requests (sandbox_id, request_id, command_id) VALUES (?, ?, ?)'),
      deleteExecRequests: db.prepare('DELETE FROM exec_requests WHERE sandbox_id = ?'),
      deleteExecRequest: db.prepare('DELETE FROM exec_requests WHERE sandbox_id = ? AND request_id = ?'),
      putPool: db.prepare('INSERT OR REPLACE INTO pools (id, doc) VALUES (?, ?)'),
      listPools: db.prepare<[], Row>('SELECT doc FROM pools ORDER BY id'),
      deletePool: db.prepare('DELETE FROM pools WHERE id = ?'),
      putKey: db.prepare('INSERT OR REPLACE INTO api_keys (hash, tenant, role, quota, created_at) VALUES (?, ?, ?, ?, ?)'),
      deleteKey: db.prepare('DELETE FROM api_keys WHERE substr(hash, 1, 16) = ?'),
      getKey: db.prepare<[string], { hash: string; tenant: string; role: string; quota: string; created_at: number }>('SELECT * FROM api_keys WHERE hash = ?'),
      audit: db.prepare('INSERT INTO audit (at, key_id, tenant, method, path, sandbox, status, code) VALUES (?, ?, ?, ?, ?, ?, ?, ?)'),
      listAudit: db.prepare<[string | null, string | null, string | null, string | null, number], AuditRow>(
        'SELECT * FROM audit WHERE (? IS NULL OR tenant = ?) AND (? IS NULL OR sandbox = ?) ORDER BY seq DESC LIMIT ?',
      ),
    };
  }

  insertSandbox(r: SandboxRecord): void {
    this.db.transaction(() => {
      this.stmts.insert.run(r.id, r.tenant, r.node, r.state, r.createdAt, r.requestId, JSON.stringify(r));
      for (const [k, v] of Object.entries(r.labels)) this.stmts.insertLabel.run(r.id, k, v);
    })();
  }

  updateSandbox(id: string, patch: Partial<Pick<SandboxRecord, 'state' | 'expiresAt' | 'lastActivityAt' | 'error' | 'network'>>): void {
    const cur = this.getSandbox(id);
    if (!cur) return;
    const next = { ...cur, ...patch };
    this.stmts.update.run(next.state, JSON.stringify(next), id);
  }

  getSandbox(id: string): SandboxRecord | undefined {
    const row = this.stmts.get.get(id);
    return row ? (JSON.parse(row.doc) as SandboxRecord) : undefined;
  }

  findByRequestId(tenant: string, requestId: string): SandboxRecord | undefined {
    const row = this.stmts.byRequest.get(tenant, requestId);
    return row ? (JSON.parse(row.doc) as SandboxRecord) : undefined;
  }

  listSandboxes(f: ListFilter): SandboxRecord[] {
    const where = ['s.tenant = ?'];
    const args: unknown[] = [f.tenant];
    if (f.state) {
      where.push('s.state = ?');
      args.push(f.state);
    }
    if (f.after) {
      where.push('s.id > ?');
      args.push(f.after);
    }
    for (const [k, v] of f.labels ?? []) {
      where.push('EXISTS (SELECT 1 FROM sandbox_labels l WHERE l.id = s.id AND l.key = ? AND l.value = ?)');
      args.push(k, v);
    }
    args.push(f.limit);
    const rows = this.db.prepare<unknown[], Row>(`SELECT s.doc FROM sandboxes s WHERE ${where.join(' AND ')} ORDER BY s.id LIMIT ?`).all(...args);
    return rows.map((r) => JSON.parse(r.doc) as SandboxRecord);
  }

  liveOnNode(node: string): SandboxRecord[] {
    return this.stmts.live.all(node).map((r) => JSON.parse(r.doc) as SandboxRecord);
  }

  tenantUsage(tenant: string): { sandboxes: number; cpu: number; memoryMiB: number } {
    const u = { sandboxes: 0, cpu: 0, memoryMiB: 0 };
    for (const r of this.stmts.usage.all(tenant)) {
      const rec = JSON.parse(r.doc) as SandboxRecord;
      u.sandboxes++;
      u.cpu += rec.resources.cpu;
      u.memoryMiB += rec.resources.memoryMiB;
    }
    return u;
  }

  deleteSandbox(id: string): void {
    this.stmts.del.run(id);
  }

  execRequest(sandboxId: string, requestId: string): string | undefined {
    return this.stmts.execRequest.get(sandboxId, requestId)?.command_id;
  }

  putExecRequest(sandboxId: string, requestId: string, commandId: string): boolean {
    return this.stmts.putExecRequest.run(sandboxId, requestId, commandId).changes > 0;
  }

  deleteExecRequest(sandboxId: string, requestId: string): void {
    this.stmts.deleteExecRequest.run(sandboxId, requestId);
  }

  deleteExecRequests(sandboxId: string): void {
    this.stmts.deleteExecRequests.run(sandboxId);
  }

  putPool(p: PoolRecord): void {
    this.stmts.putPool.run(p.id, JSON.stringify(p));
  }

  listPools(): PoolRecord[] {
    return this.stmts.listPools.all().map((r) => JSON.parse(r.doc) as PoolRecord);
  }

  deletePool(id: string): void {
    this.stmts.deletePool.run(id);
  }

  putKey(k: KeyRecord): void {
    this.stmts.putKey.run(k.hash, k.tenant, k.role, JSON.stringify(k.quota), k.createdAt);
  }

  deleteKeyByPrefix(hashPrefix: string): boolean {
    return this.stmts.deleteKey.run(hashPrefix).changes > 0;
  }

  getKey(hash: string): KeyRecord | undefined {
    const r = this.stmts.getKey.get(hash);
    if (!r) return undefined;
    return {
      hash: r.hash,
      tenant: r.tenant,
      role: r.role === 'admin' || r.role === 'builder' || r.role === 'runner' ? r.role : 'user',
      quota: JSON.parse(r.quota) as KeyRecord['quota'],
      createdAt: r.created_at,
    };
  }

  appendAudit(entries: AuditEntry[]): void {
    this.db.transaction(() => {
      for (const e of entries) this.stmts.audit.run(Date.parse(e.at), e.keyId, e.tenant, e.method, e.path, e.sandbox, e.status, e.code);
    })();
  }

  listAudit(q: { limit: number; tenant?: string; sandbox?: string }): AuditEntry[] {
    const t = q.tenant ?? null;
    const s = q.sandbox ?? null;
    return this.stmts.listAudit.all(t, t, s, s, q.limit).map((r) => ({
      at: new Date(r.at).toISOString(),
      keyId: r.key_id,
      tenant: r.tenant,
      method: r.method,
      path: r.path,
      sandbox: r.sandbox,
      status: r.status,
      code: r.code,
    }));
  }

  close(): void {
    this.db.close();
  }
}
