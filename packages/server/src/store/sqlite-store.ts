import Database from 'better-sqlite3';
import { Worker } from 'node:worker_threads';
import type { AuditEntry, Image, SandboxState } from '@warren/api';
import type { LayerNameRow } from '@warren/images';
import { SqliteLeases } from './sqlite-leases.js';
import { SqliteEvents } from './sqlite-events.js';
import { SqliteWebhooks } from './sqlite-webhooks.js';
import { SqliteSandboxImages } from './sandbox-images.js';
import { sandboxWrites } from './sqlite-sandbox-writes.js';
import { addLiveColumn } from './sqlite-live.js';
import type { KeyRecord, ListFilter, NodeRecord, NodeState, PoolRecord, SandboxEndRecord, SandboxRecord, Store, TenantUsage } from './store.js';

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
CREATE TABLE IF NOT EXISTS images (
  name TEXT PRIMARY KEY,
  tenant TEXT,
  doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS image_layers (
  image TEXT NOT NULL REFERENCES images (name) ON DELETE CASCADE,
  digest TEXT NOT NULL,
  PRIMARY KEY (image, digest)
);
CREATE INDEX IF NOT EXISTS image_layers_digest ON image_layers (digest);
CREATE TABLE IF NOT EXISTS layer_names (
  name TEXT PRIMARY KEY,
  digest TEXT NOT NULL,
  tenant TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS layer_names_digest ON layer_names (digest);
CREATE TABLE IF NOT EXISTS layer_sources (
  diff_id TEXT PRIMARY KEY,
  digest TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS layer_sources_digest ON layer_sources (digest);
CREATE TABLE IF NOT EXISTS nodes (
  id TEXT PRIMARY KEY,
  boot TEXT NOT NULL,
  state TEXT NOT NULL,
  heartbeat_at INTEGER NOT NULL,
  doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS replicas (id TEXT PRIMARY KEY, url TEXT NOT NULL, seen_at INTEGER NOT NULL);
`;

/** How often the checkpoint thread copies the log into the database (ms). */
const CHECKPOINT_EVERY_MS = 100;
/**
 * The log's length at which the writer checkpoints itself (pages of 4 KiB, ~80 MiB): only when the
 * checkpoint thread cannot keep up or is gone (SQLite's default, 1,000, put every checkpoint on
 * the event loop's thread).
 */
const WRITER_CHECKPOINT_PAGES = 20_000;
const SQLITE_DEFAULT_CHECKPOINT_PAGES = 1000;
/** What of the log's file is kept after a checkpoint restarts it (bytes): a burst's long log does not hold the disk after. */
const WAL_KEPT_BYTES = 64 * 2 ** 20;

type Row = { doc: string };
type NodeRow = { id: string; boot: string; state: string; heartbeat_at: number; doc: string };
type NodeDoc = Pick<NodeRecord, 'address' | 'token' | 'info' | 'load' | 'joinedAt'> & { tlsFingerprint?: string | null };
type LayerNameDbRow = { name: string; digest: string; tenant: string | null; created_at: string };
const layerName = (r: LayerNameDbRow): LayerNameRow => ({ name: r.name, digest: r.digest, tenant: r.tenant, createdAt: r.created_at });
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
  readonly writesInline = true;
  private readonly db: Database.Database;
  private readonly stmts;
  /** The sandbox record's writes, each a transaction made once (sqlite-sandbox-writes.ts). */
  private readonly writes;
  /** The thread that checkpoints the log (sqlite-checkpoint-worker.ts). */
  private readonly checkpoints: Worker;
  private readonly checkpointsEnded: Promise<unknown>;
  readonly leases: SqliteLeases;
  readonly events: SqliteEvents;
  readonly webhooks: SqliteWebhooks;
  readonly sandboxImages: SqliteSandboxImages;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('foreign_keys = ON');
    this.db.exec(SCHEMA);
    addLiveColumn(this.db);
    this.leases = new SqliteLeases(this.db);
    this.events = new SqliteEvents(this.db);
    this.webhooks = new SqliteWebhooks(this.db);
    this.sandboxImages = new SqliteSandboxImages(this.db);
    const db = this.db;
    this.stmts = {
      insert: db.prepare('INSERT INTO sandboxes (id, tenant, node, state, live, created_at, request_id, lease, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)'),
      insertLabel: db.prepare('INSERT INTO sandbox_labels (id, key, value) VALUES (?, ?, ?)'),
      update: db.prepare('UPDATE sandboxes SET state = ?, live = ?, node = ?, doc = ? WHERE id = ?'),
      setDoc: db.prepare('UPDATE sandboxes SET doc = ? WHERE id = ?'),
      // In SQLite's JSON, not a parse and a stringify of the whole record in JavaScript.
      markStarted: db.prepare("UPDATE sandboxes SET state = 'running', doc = json_set(doc, '$.state', 'running') WHERE id = ? AND state = 'creating'"),
      get: db.prepare<[string], Row>('SELECT doc FROM sandboxes WHERE id = ?'),
      byRequest: db.prepare<[string, string], Row>('SELECT doc FROM sandboxes WHERE tenant = ? AND request_id = ?'),
      live: db.prepare<[string], Row>('SELECT doc FROM sandboxes WHERE node = ? AND live = 1'),
      usageByTenant: db.prepare<[], { tenant: string; n: number; cpu: number | null; mem: number | null }>(
        `SELECT tenant, count(*) AS n, sum(json_extract(doc, '$.resources.cpu')) AS cpu, sum(json_extract(doc, '$.resources.memoryMiB')) AS mem
         FROM sandboxes INDEXED BY sandboxes_live WHERE live = 1 GROUP BY tenant ORDER BY tenant`,
      ),
      staleCreating: db.prepare<[number, number], Row>(
        "SELECT doc FROM sandboxes INDEXED BY sandboxes_live WHERE live = 1 AND state = 'creating' AND created_at < ? ORDER BY created_at LIMIT ?",
      ),
      // Summed in SQLite: parsing every live record in JavaScript took 40 ms a create at 10,000 (15 now).
      usage: db.prepare<[string], { n: number; cpu: number | null; mem: number | null }>(
        `SELECT count(*) AS n, sum(json_extract(doc, '$.resources.cpu')) AS cpu, sum(json_extract(doc, '$.resources.memoryMiB')) AS mem
         FROM sandboxes INDEXED BY sandboxes_live WHERE tenant = ? AND live = 1`,
      ),
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
      getImage: db.prepare<[string], Row>('SELECT doc FROM images WHERE name = ?'),
      listImages: db.prepare<[], Row>('SELECT doc FROM images ORDER BY name'),
      putImage: db.prepare(
        'INSERT INTO images (name, tenant, doc) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, doc = excluded.doc',
      ),
      clearImageLayers: db.prepare('DELETE FROM image_layers WHERE image = ?'),
      putImageLayer: db.prepare('INSERT OR IGNORE INTO image_layers (image, digest) VALUES (?, ?)'),
      deleteImage: db.prepare('DELETE FROM images WHERE name = ?'),
      getLayerName: db.prepare<[string], LayerNameDbRow>('SELECT * FROM layer_names WHERE name = ?'),
      listLayerNames: db.prepare<[], LayerNameDbRow>('SELECT * FROM layer_names ORDER BY name'),
      putLayerName: db.prepare('INSERT OR REPLACE INTO layer_names (name, digest, tenant, created_at) VALUES (?, ?, ?, ?)'),
      deleteLayerName: db.prepare('DELETE FROM layer_names WHERE name = ?'),
      layerSource: db.prepare<[string], { digest: string }>('SELECT digest FROM layer_sources WHERE diff_id = ?'),
      putLayerSource: db.prepare('INSERT OR REPLACE INTO layer_sources (diff_id, digest) VALUES (?, ?)'),
      deleteLayerSources: db.prepare('DELETE FROM layer_sources WHERE digest = ?'),
      // A tenant (null: any) may use what is every tenant's (tenant NULL) or its own.
      holdsLayer: db.prepare<[string, string | null, string | null, string, string | null, string | null], { one: number }>(
        `SELECT 1 AS one FROM image_layers il JOIN images i ON i.name = il.image WHERE il.digest = ? AND (? IS NULL OR i.tenant IS NULL OR i.tenant = ?)
         UNION ALL SELECT 1 FROM layer_names WHERE digest = ? AND (? IS NULL OR tenant IS NULL OR tenant = ?) LIMIT 1`,
      ),
      namedLayers: db.prepare<[], { digest: string }>('SELECT digest FROM image_layers UNION SELECT digest FROM layer_names'),
      putNode: db.prepare(
        `INSERT INTO nodes (id, boot, state, heartbeat_at, doc) VALUES (?, ?, 'joining', ?, ?)
         ON CONFLICT (id) DO UPDATE SET boot = excluded.boot, state = CASE nodes.state WHEN 'draining' THEN 'draining' ELSE 'joining' END, heartbeat_at = excluded.heartbeat_at, doc = excluded.doc`,
      ),
      getNode: db.prepare<[string], NodeRow>('SELECT * FROM nodes WHERE id = ?'),
      listNodes: db.prepare<[], NodeRow>('SELECT * FROM nodes ORDER BY id'),
      heartbeat: db.prepare("UPDATE nodes SET heartbeat_at = ?, doc = json_set(doc, '$.load', json(?)) WHERE id = ? AND boot = ? AND state <> 'down'"),
      nodeState: db.prepare('UPDATE nodes SET state = ? WHERE id = ?'),
      markDown: db.prepare<[number], { id: string }>("UPDATE nodes SET state = 'down' WHERE state <> 'down' AND heartbeat_at < ? RETURNING id"),
      listAudit: db.prepare<[string | null, string | null, string | null, string | null, number], AuditRow>(
        'SELECT * FROM audit WHERE (? IS NULL OR tenant = ?) AND (? IS NULL OR sandbox = ?) ORDER BY seq DESC LIMIT ?',
      ),
    };
    this.writes = sandboxWrites(db, this.stmts, (tenant) => this.usageOf(tenant));
    // Last: a constructor that threw before this leaves no thread behind.
    this.db.pragma(`journal_size_limit = ${WAL_KEPT_BYTES}`);
    this.db.pragma(`wal_autocheckpoint = ${WRITER_CHECKPOINT_PAGES}`);
    this.checkpoints = new Worker(new URL('./sqlite-checkpoint-worker.js', import.meta.url), { workerData: { file, everyMs: CHECKPOINT_EVERY_MS } });
    this.checkpoints.on('error', () => undefined);
    this.checkpointsEnded = new Promise((resolve) =>
      this.checkpoints.once('exit', () => {
        // Gone before the store closed (it could not open the file, say): the writer checkpoints
        // as SQLite does by default again.
        if (this.db.open) this.db.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_CHECKPOINT_PAGES}`);
        resolve(undefined);
      }),
    );
    this.checkpoints.unref();
  }

  insertSandbox(r: SandboxRecord, o: { admit?: (usage: TenantUsage) => void } = {}): Promise<void> {
    return this.insertSandboxes([r], o);
  }

  async insertSandboxes(rs: SandboxRecord[], o: { admit?: (usage: TenantUsage) => void } = {}): Promise<void> {
    const tenant = rs[0]?.tenant;
    if (tenant === undefined) return;
    if (o.admit && rs.some((r) => r.tenant !== tenant)) throw new Error('insertSandboxes counts the quota of one tenant');
    // IMMEDIATE: the write lock is taken before the usage is read, so another process on the
    // same file cannot insert between the check and the insert either.
    this.writes.insert.immediate(rs, tenant, o.admit);
  }

  /** One transaction for the group (a commit each made it ~110 µs a sandbox; 15 µs in groups of 16). */
  async markStarted(ids: string[]): Promise<string[]> {
    return this.writes.markStarted.immediate(ids);
  }

  async updateSandbox(
    id: string,
    patch: Partial<Pick<SandboxRecord, 'state' | 'expiresAt' | 'lastActivityAt' | 'error' | 'network' | 'node' | 'end' | 'layers'>>,
    o: { from?: SandboxState[] } = {},
  ): Promise<boolean> {
    // Read and written under the write lock: another process on the same file (a replica) cannot
    // end the sandbox between the two and have its end written over.
    return this.writes.update.immediate(id, patch, o.from);
  }

  async endSandbox(id: string, end: Pick<SandboxRecord, 'state' | 'error' | 'end'>, o: { tenant?: string } = {}): Promise<SandboxRecord | undefined> {
    return this.writes.end(id, end, o.tenant);
  }

  async setActivity(entries: Array<{ id: string; at: number }>): Promise<void> {
    this.writes.activity(entries);
  }

  async getSandbox(id: string): Promise<SandboxRecord | undefined> {
    const row = this.stmts.get.get(id);
    return row ? (JSON.parse(row.doc) as SandboxRecord) : undefined;
  }

  async findByRequestId(tenant: string, requestId: string): Promise<SandboxRecord | undefined> {
    const row = this.stmts.byRequest.get(tenant, requestId);
    return row ? (JSON.parse(row.doc) as SandboxRecord) : undefined;
  }

  async listSandboxes(f: ListFilter): Promise<SandboxRecord[]> {
    const where = ['s.tenant = ?'];
    const args: unknown[] = [f.tenant];
    if (f.state) {
      where.push('s.state = ?');
      args.push(f.state);
    }
    if (f.states) {
      where.push(`s.state IN (${f.states.map(() => '?').join(', ') || 'NULL'})`);
      args.push(...f.states);
    }
    if (f.lease) {
      where.push('s.lease = ?');
      args.push(f.lease);
    }
    if (f.image) {
      where.push("json_extract(s.doc, '$.image') = ?");
      args.push(f.image);
    }
    if (f.after) {
      where.push('s.id > ?');
      args.push(f.after);
    }
    if (f.before) {
      where.push('s.id < ?');
      args.push(f.before);
    }
    for (const [k, v] of f.labels ?? []) {
      where.push('EXISTS (SELECT 1 FROM sandbox_labels l WHERE l.id = s.id AND l.key = ? AND l.value = ?)');
      args.push(k, v);
    }
    args.push(f.limit);
    const order = f.order === 'desc' ? 'DESC' : 'ASC';
    const rows = this.db.prepare<unknown[], Row>(`SELECT s.doc FROM sandboxes s WHERE ${where.join(' AND ')} ORDER BY s.id ${order} LIMIT ?`).all(...args);
    return rows.map((r) => JSON.parse(r.doc) as SandboxRecord);
  }

  async liveOnNode(node: string): Promise<SandboxRecord[]> {
    return this.stmts.live.all(node).map((r) => JSON.parse(r.doc) as SandboxRecord);
  }

  async usageByTenant(): Promise<Array<TenantUsage & { tenant: string }>> {
    return this.stmts.usageByTenant.all().map((r) => ({ tenant: r.tenant, sandboxes: r.n, cpu: r.cpu ?? 0, memoryMiB: r.mem ?? 0 }));
  }

  async staleCreating(olderThanMs: number, limit: number): Promise<SandboxRecord[]> {
    return this.stmts.staleCreating.all(Date.now() - olderThanMs, limit).map((r) => JSON.parse(r.doc) as SandboxRecord);
  }

  async tenantUsage(tenant: string): Promise<TenantUsage> {
    return this.usageOf(tenant);
  }

  private usageOf(tenant: string): TenantUsage {
    const r = this.stmts.usage.get(tenant);
    return { sandboxes: r?.n ?? 0, cpu: r?.cpu ?? 0, memoryMiB: r?.mem ?? 0 };
  }

  async deleteSandbox(id: string): Promise<void> {
    this.stmts.del.run(id);
  }

  async execRequest(sandboxId: string, requestId: string): Promise<string | undefined> {
    return this.stmts.execRequest.get(sandboxId, requestId)?.command_id;
  }

  async putExecRequest(sandboxId: string, requestId: string, commandId: string): Promise<boolean> {
    return this.stmts.putExecRequest.run(sandboxId, requestId, commandId).changes > 0;
  }

  async deleteExecRequest(sandboxId: string, requestId: string): Promise<void> {
    this.stmts.deleteExecRequest.run(sandboxId, requestId);
  }

  async deleteExecRequests(sandboxId: string): Promise<void> {
    this.stmts.deleteExecRequests.run(sandboxId);
  }

  async putPool(p: PoolRecord): Promise<void> {
    this.stmts.putPool.run(p.id, JSON.stringify(p));
  }

  async listPools(): Promise<PoolRecord[]> {
    return this.stmts.listPools.all().map((r) => JSON.parse(r.doc) as PoolRecord);
  }

  async deletePool(id: string): Promise<void> {
    this.stmts.deletePool.run(id);
  }

  async putKey(k: KeyRecord): Promise<void> {
    this.stmts.putKey.run(k.hash, k.tenant, k.role, JSON.stringify(k.quota), k.createdAt);
  }

  async deleteKeyByPrefix(hashPrefix: string): Promise<boolean> {
    return this.stmts.deleteKey.run(hashPrefix).changes > 0;
  }

  async getKey(hash: string): Promise<KeyRecord | undefined> {
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

  async appendAudit(entries: AuditEntry[]): Promise<void> {
    this.writes.audit(entries);
  }

  async listAudit(q: { limit: number; tenant?: string; sandbox?: string }): Promise<AuditEntry[]> {
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

  async getImage(name: string): Promise<Image | undefined> {
    const row = this.stmts.getImage.get(name);
    return row ? (JSON.parse(row.doc) as Image) : undefined;
  }

  async listImages(): Promise<Image[]> {
    return this.stmts.listImages.all().map((r) => JSON.parse(r.doc) as Image);
  }

  async putImage(image: Image): Promise<void> {
    this.db.transaction(() => {
      this.stmts.putImage.run(image.name, image.tenant, JSON.stringify(image));
      this.stmts.clearImageLayers.run(image.name);
      for (const d of image.layers) this.stmts.putImageLayer.run(image.name, d);
    })();
  }

  async deleteImage(name: string): Promise<boolean> {
    return this.stmts.deleteImage.run(name).changes > 0;
  }

  async getLayerName(name: string): Promise<LayerNameRow | undefined> {
    const r = this.stmts.getLayerName.get(name);
    return r ? layerName(r) : undefined;
  }

  async listLayerNames(): Promise<LayerNameRow[]> {
    return this.stmts.listLayerNames.all().map(layerName);
  }

  async putLayerName(row: LayerNameRow): Promise<void> {
    this.stmts.putLayerName.run(row.name, row.digest, row.tenant, row.createdAt);
  }

  async deleteLayerName(name: string): Promise<boolean> {
    return this.stmts.deleteLayerName.run(name).changes > 0;
  }

  async layerSource(diffId: string): Promise<string | undefined> {
    return this.stmts.layerSource.get(diffId)?.digest;
  }

  async putLayerSource(diffId: string, digest: string): Promise<void> {
    this.stmts.putLayerSource.run(diffId, digest);
  }

  async deleteLayerSources(digests: string[]): Promise<void> {
    this.db.transaction(() => {
      for (const d of digests) this.stmts.deleteLayerSources.run(d);
    })();
  }

  async holdsLayer(digest: string, tenant?: string): Promise<boolean> {
    const t = tenant ?? null;
    return this.stmts.holdsLayer.get(digest, t, t, digest, t, t) !== undefined;
  }

  async namedLayers(): Promise<Set<string>> {
    return new Set(this.stmts.namedLayers.all().map((r) => r.digest));
  }

  async putNode(n: Omit<NodeRecord, 'heartbeatAt' | 'silentMs' | 'state' | 'joinedAt'>): Promise<void> {
    const now = Date.now();
    const doc: NodeDoc = { address: n.address, token: n.token, tlsFingerprint: n.tlsFingerprint, info: n.info, load: n.load, joinedAt: now };
    this.stmts.putNode.run(n.id, n.boot, now, JSON.stringify(doc));
  }

  async heartbeatNodes(beats: Array<{ id: string; boot: string; load: unknown }>): Promise<boolean[]> {
    const now = Date.now();
    return this.db.transaction(() => beats.map((b) => this.stmts.heartbeat.run(now, JSON.stringify(b.load), b.id, b.boot).changes > 0))();
  }

  async seeReplica(id: string, url: string): Promise<void> {
    this.db
      .prepare('INSERT INTO replicas (id, url, seen_at) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at')
      .run(id, url, Date.now());
  }

  async liveReplicas(withinMs: number, except: string): Promise<Array<{ id: string; url: string }>> {
    const now = Date.now();
    this.db.prepare('DELETE FROM replicas WHERE seen_at < ?').run(now - 86_400_000);
    return this.db
      .prepare<[number, string], { id: string; url: string }>('SELECT id, url FROM replicas WHERE seen_at >= ? AND id <> ? ORDER BY id')
      .all(now - withinMs, except);
  }

  async listNodes(): Promise<NodeRecord[]> {
    const now = Date.now();
    return this.stmts.listNodes.all().map((r) => nodeOf(r, now));
  }

  async getNode(id: string): Promise<NodeRecord | undefined> {
    const r = this.stmts.getNode.get(id);
    return r ? nodeOf(r, Date.now()) : undefined;
  }

  async setNodeState(id: string, state: NodeState, o: { from?: NodeState[] } = {}): Promise<boolean> {
    const r = this.stmts.getNode.get(id);
    if (!r || (o.from && !o.from.includes(r.state as NodeState))) return false;
    return this.stmts.nodeState.run(state, id).changes > 0;
  }

  async markNodesDown(silentMs: number): Promise<string[]> {
    return this.stmts.markDown.all(Date.now() - silentMs).map((r) => r.id);
  }

  async failLiveOnNode(node: string, error: { code: string; message: string }, end: SandboxEndRecord): Promise<string[]> {
    return this.writes.failLive(node, error, end);
  }

  roundTrips(): number {
    return 0;
  }

  /** The log's length at which the writer checkpoints itself (pages). */
  walCheckpointPages(): number {
    return this.db.pragma('wal_autocheckpoint', { simple: true }) as number;
  }

  async close(): Promise<void> {
    // Held while it ends (unreferenced, it would let this process exit before).
    this.checkpoints.ref();
    this.checkpoints.postMessage('close');
    await this.checkpointsEnded;
    this.db.close();
  }
}

/** A node's row as a NodeRecord, its silence measured at `now`. */
function nodeOf(r: NodeRow, now: number): NodeRecord {
  const doc = JSON.parse(r.doc) as NodeDoc;
  // A row written before nodes could speak TLS has no fingerprint: plain TCP.
  return {
    id: r.id,
    boot: r.boot,
    state: r.state as NodeState,
    heartbeatAt: r.heartbeat_at,
    silentMs: Math.max(0, now - r.heartbeat_at),
    tlsFingerprint: null,
    ...doc,
  };
}
