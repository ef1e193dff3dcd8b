import pg from 'pg';
import { WarrenError } from '@warren/api';
import type { AuditEntry, Image, SandboxState } from '@warren/api';
import type { LayerNameRow } from '@warren/images';
import { PG_LEASES_SCHEMA, PgLeases } from './pg-leases.js';
import { PG_SCHEMA } from './pg-schema.js';
import { PG_EVENTS_SCHEMA, PgEvents } from './pg-events.js';
import { PG_WEBHOOKS_SCHEMA, PgWebhooks } from './pg-webhooks.js';
import { PgSandboxImages } from './sandbox-images.js';
import type { KeyRecord, ListFilter, NodeRecord, NodeState, PoolRecord, SandboxEndRecord, SandboxRecord, Store, TenantUsage } from './store.js';

/** The advisory lock key the schema is made under (one replica at a time). */
const SCHEMA_LOCK = 0x77617272;

type Doc<T> = { doc: T };
/** What a statement is sent through: the pool, or a transaction's connection. */
type Queryable = Pick<pg.PoolClient, 'query'>;
type LayerNameDbRow = { name: string; digest: string; tenant: string | null; created_at: string };
const layerName = (r: LayerNameDbRow): LayerNameRow => ({ name: r.name, digest: r.digest, tenant: r.tenant, createdAt: r.created_at });
/** Creates marked running, only those still `creating`, and done off the list of creates in flight. */
const MARK_STARTED = `WITH m AS (UPDATE sandboxes SET state = 'running', doc = doc || '{"state":"running"}'::jsonb WHERE id = ANY($1::text[]) AND state = 'creating' RETURNING id),
  d AS (DELETE FROM sandbox_creates WHERE id = ANY(ARRAY(SELECT id FROM m)))
SELECT id FROM m`;
/** A live sandbox (creating, running, paused): the generated column, which the indexes use. */
const LIVE = `live`;
/** The database's clock in ms: every replica and edge reads node times by this one clock. */
const NOW_MS = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
type NodeRow = {
  id: string;
  boot: string;
  state: NodeState;
  heartbeat_at: string;
  silent_ms: string;
  doc: Pick<NodeRecord, 'address' | 'token' | 'info' | 'load' | 'joinedAt'> & { tlsFingerprint?: string | null };
};
const NODE_COLUMNS = `id, boot, state, heartbeat_at, ${NOW_MS} - heartbeat_at AS silent_ms, doc`;
const nodeOf = (r: NodeRow): NodeRecord => ({
  id: r.id,
  boot: r.boot,
  state: r.state,
  heartbeatAt: Number(r.heartbeat_at),
  silentMs: Math.max(0, Number(r.silent_ms)),
  // A row written before nodes could speak TLS has no fingerprint: plain TCP.
  tlsFingerprint: null,
  ...r.doc,
});

/**
 * The cluster's store: PostgreSQL through a pool of connections. Every call is one statement or
 * one transaction; a create's quota check holds its tenant's advisory lock for the transaction,
 * so creates of one tenant through any replica are counted one after another. The statements
 * every create sends (its record, its running mark, its events and audit) are named: prepared
 * once a connection, where planning each cost about as much as running it.
 * @example
 * const store = await PgStore.open('postgres://warren@db.example/warren');
 */
export class PgStore implements Store {
  private trips = 0;
  readonly leases: PgLeases;
  readonly events: PgEvents;
  readonly webhooks: PgWebhooks;
  readonly sandboxImages: PgSandboxImages;

  private constructor(private readonly pool: pg.Pool) {
    this.leases = new PgLeases(pool);
    this.events = new PgEvents(pool);
    this.webhooks = new PgWebhooks(pool);
    this.sandboxImages = new PgSandboxImages(pool);
    // Every statement is a round trip: counted where they all pass (the pool's and a transaction's client's query).
    const query = pool.query.bind(pool) as (...a: unknown[]) => Promise<unknown>;
    pool.query = ((...args: unknown[]) => {
      this.trips++;
      return query(...args).catch(unreachable);
    }) as typeof pool.query;
  }

  roundTrips(): number {
    return this.trips;
  }

  /** Connects and makes the tables if they are not there (under a lock: replicas may start together). */
  static async open(url: string, o: { max?: number } = {}): Promise<PgStore> {
    const pool = new pg.Pool({ connectionString: url, max: o.max ?? 16 });
    // A connection that breaks while idle is dropped by the pool; its error must not end the process.
    pool.on('error', () => undefined);
    const c = await pool.connect().catch(async (e: unknown) => {
      await pool.end();
      throw e;
    });
    let failed = false;
    try {
      await c.query('SELECT pg_advisory_lock($1)', [SCHEMA_LOCK]);
      try {
        await c.query(PG_SCHEMA);
        await c.query(PG_LEASES_SCHEMA);
        await c.query(PG_EVENTS_SCHEMA);
        await c.query(PG_WEBHOOKS_SCHEMA);
      } finally {
        // Never left held on a pooled connection: the other replicas' opens wait on it.
        await c.query('SELECT pg_advisory_unlock($1)', [SCHEMA_LOCK]).catch(() => undefined);
      }
    } catch (e) {
      failed = true;
      throw e;
    } finally {
      c.release(failed);
      if (failed) await pool.end().catch(() => undefined);
    }
    return new PgStore(pool);
  }

  /** Runs `fn` in a transaction on one connection. */
  private async tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    const c = await this.pool.connect().catch(unreachable);
    // BEGIN, each statement, COMMIT: a round trip each.
    const q: Queryable = {
      query: ((...args: Parameters<typeof c.query>) => {
        this.trips++;
        return (c.query as (...a: unknown[]) => Promise<unknown>)(...args).catch(unreachable);
      }) as typeof c.query,
    };
    try {
      await q.query('BEGIN');
      const r = await fn(q);
      await q.query('COMMIT');
      return r;
    } catch (e) {
      await q.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      c.release();
    }
  }

  private async docs<T>(sql: string, args: unknown[]): Promise<T[]> {
    return (await this.pool.query<Doc<T>>(sql, args)).rows.map((r) => r.doc);
  }

  insertSandbox(r: SandboxRecord, o: { admit?: (usage: TenantUsage) => void } = {}): Promise<void> {
    return this.insertSandboxes([r], o);
  }

  async insertSandboxes(rs: SandboxRecord[], o: { admit?: (usage: TenantUsage) => void } = {}): Promise<void> {
    const tenant = rs[0]?.tenant;
    if (tenant === undefined) return;
    if (o.admit && rs.some((r) => r.tenant !== tenant)) throw new Error('insertSandboxes counts the quota of one tenant');
    // The records, their labels and the creates among them in one statement (one round trip,
    // whatever the count), sent as one JSON array: one JSON.stringify, where arrays of text would
    // escape every record again.
    const args = [JSON.stringify(rs)];
    const insert = `WITH r AS (SELECT value AS doc FROM jsonb_array_elements($1::jsonb)),
      s AS (
        INSERT INTO sandboxes (id, tenant, node, state, created_at, request_id, lease, doc)
        SELECT doc->>'id', doc->>'tenant', doc->>'node', doc->>'state', ${NOW_MS}, doc->>'requestId', doc->>'lease', doc FROM r
        RETURNING id, state, created_at),
      c AS (INSERT INTO sandbox_creates (id, created_at) SELECT id, created_at FROM s WHERE state = 'creating')
      INSERT INTO sandbox_labels (id, key, value) SELECT r.doc->>'id', l.key, l.value FROM r, jsonb_each_text(r.doc->'labels') AS l
      WHERE (SELECT count(*) FROM s) > 0`;
    // Creates without a quota to check count nothing: no lock, no transaction.
    if (!o.admit) {
      await this.pool.query({ name: 'sandboxes-insert', text: insert, values: args });
      return;
    }
    const admit = o.admit;
    await this.tx(async (c) => {
      // Every counted insert of a tenant takes its lock: what one counts, the next sees.
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [tenant]);
      admit(await usageOf(c, tenant));
      await c.query({ name: 'sandboxes-insert', text: insert, values: args });
    });
  }

  async markStarted(ids: string[]): Promise<string[]> {
    // A HOT update (see PG_SCHEMA), and the creates done off the list.
    const r = await this.pool.query<{ id: string }>({ name: 'sandboxes-mark-started', text: MARK_STARTED, values: [ids] });
    return r.rows.map((x) => x.id);
  }

  async updateSandbox(
    id: string,
    patch: Partial<Pick<SandboxRecord, 'state' | 'expiresAt' | 'lastActivityAt' | 'error' | 'network' | 'node' | 'end' | 'layers'>>,
    o: { from?: SandboxState[] } = {},
  ): Promise<boolean> {
    // The patch merged and the state checked in the statement: two patches at once both land,
    // and a state change `from` others does not undo one made meanwhile.
    const r = await this.pool.query(
      `UPDATE sandboxes SET doc = doc || $2::jsonb, state = COALESCE($2::jsonb ->> 'state', state), node = COALESCE($2::jsonb ->> 'node', node) WHERE id = $1 AND ($3::text[] IS NULL OR state = ANY($3::text[]))`,
      [id, JSON.stringify(patch), o.from ?? null],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async endSandbox(id: string, end: Pick<SandboxRecord, 'state' | 'error' | 'end'>, o: { tenant?: string } = {}): Promise<SandboxRecord | undefined> {
    // Every part of the statement sees the row as it was before it: `old` is the record before the
    // end. Two ends at once both read it live; only the one whose update took it answers it so (the
    // other answers it stopped: one end is counted, and told of, once).
    const r = await this.pool.query<Doc<SandboxRecord>>(
      `WITH old AS (SELECT doc FROM sandboxes WHERE id = $1 AND ($3::text IS NULL OR tenant = $3)),
        ended AS (UPDATE sandboxes SET doc = doc || $2::jsonb, state = $2::jsonb ->> 'state'
          WHERE id = $1 AND ${LIVE} AND EXISTS (SELECT 1 FROM old) RETURNING id),
        forgot AS (DELETE FROM exec_requests WHERE sandbox_id = $1 AND EXISTS (SELECT 1 FROM old))
      SELECT CASE WHEN EXISTS (SELECT 1 FROM ended) OR doc->>'state' NOT IN ('creating', 'running', 'paused') THEN doc
        ELSE doc || '{"state": "stopped"}'::jsonb END AS doc FROM old`,
      [id, JSON.stringify({ state: end.state, error: end.error, end: end.end ?? null }), o.tenant ?? null],
    );
    return r.rows[0]?.doc;
  }

  async setActivity(entries: Array<{ id: string; at: number }>): Promise<void> {
    if (!entries.length) return;
    await this.pool.query(
      `UPDATE sandboxes s SET doc = s.doc || jsonb_build_object('lastActivityAt', a.at) FROM unnest($1::text[], $2::bigint[]) AS a(id, at) WHERE s.id = a.id`,
      [entries.map((e) => e.id), entries.map((e) => e.at)],
    );
  }

  async getSandbox(id: string): Promise<SandboxRecord | undefined> {
    return (await this.docs<SandboxRecord>('SELECT doc FROM sandboxes WHERE id = $1', [id]))[0];
  }

  async findByRequestId(tenant: string, requestId: string): Promise<SandboxRecord | undefined> {
    return (await this.docs<SandboxRecord>('SELECT doc FROM sandboxes WHERE tenant = $1 AND request_id = $2', [tenant, requestId]))[0];
  }

  async listSandboxes(f: ListFilter): Promise<SandboxRecord[]> {
    const args: unknown[] = [f.tenant];
    const where = ['s.tenant = $1'];
    if (f.state) where.push(`s.state = $${args.push(f.state)}`);
    if (f.states) where.push(`s.state = ANY($${args.push(f.states)})`);
    if (f.lease) where.push(`s.lease = $${args.push(f.lease)}`);
    if (f.image) where.push(`s.doc->>'image' = $${args.push(f.image)}`);
    if (f.after) where.push(`s.id > $${args.push(f.after)}`);
    if (f.before) where.push(`s.id < $${args.push(f.before)}`);
    for (const [k, v] of f.labels ?? [])
      where.push(`EXISTS (SELECT 1 FROM sandbox_labels l WHERE l.id = s.id AND l.key = $${args.push(k)} AND l.value = $${args.push(v)})`);
    const order = f.order === 'desc' ? 'DESC' : 'ASC';
    return this.docs(`SELECT s.doc FROM sandboxes s WHERE ${where.join(' AND ')} ORDER BY s.id ${order} LIMIT $${args.push(f.limit)}`, args);
  }

  async liveOnNode(node: string): Promise<SandboxRecord[]> {
    return this.docs(`SELECT doc FROM sandboxes WHERE node = $1 AND ${LIVE}`, [node]);
  }

  async usageByTenant(): Promise<Array<TenantUsage & { tenant: string }>> {
    const r = await this.pool.query<{ tenant: string; n: string; cpu: number | null; mem: number | null }>(
      `SELECT tenant, count(*) AS n, sum((doc -> 'resources' ->> 'cpu')::float8) AS cpu, sum((doc -> 'resources' ->> 'memoryMiB')::float8) AS mem
       FROM sandboxes WHERE ${LIVE} GROUP BY tenant ORDER BY tenant`,
    );
    return r.rows.map((x) => ({ tenant: x.tenant, sandboxes: Number(x.n), cpu: x.cpu ?? 0, memoryMiB: x.mem ?? 0 }));
  }

  async staleCreating(olderThanMs: number, limit: number): Promise<SandboxRecord[]> {
    // The list's creates that ended otherwise (failed, deleted while being made) go from it here.
    // A sandbox never becomes `creating` again, and its entry is written with it: what this
    // statement sees not creating is done with. Each entry's sandbox is looked up by its key (a
    // subquery a row, an array): never a join the planner could make a scan of all sandboxes.
    return this.docs(
      `WITH done AS (DELETE FROM sandbox_creates c WHERE (SELECT s.state FROM sandboxes s WHERE s.id = c.id) IS DISTINCT FROM 'creating')
      SELECT doc FROM sandboxes WHERE id = ANY(ARRAY(SELECT id FROM sandbox_creates WHERE created_at < ${NOW_MS} - $1)) AND state = 'creating'
      ORDER BY created_at LIMIT $2`,
      [olderThanMs, limit],
    );
  }

  async tenantUsage(tenant: string): Promise<TenantUsage> {
    return usageOf(this.pool, tenant);
  }

  async deleteSandbox(id: string): Promise<void> {
    await this.pool.query('WITH c AS (DELETE FROM sandbox_creates WHERE id = $1) DELETE FROM sandboxes WHERE id = $1', [id]);
  }

  async execRequest(sandboxId: string, requestId: string): Promise<string | undefined> {
    const r = await this.pool.query<{ command_id: string }>('SELECT command_id FROM exec_requests WHERE sandbox_id = $1 AND request_id = $2', [
      sandboxId,
      requestId,
    ]);
    return r.rows[0]?.command_id;
  }

  async putExecRequest(sandboxId: string, requestId: string, commandId: string): Promise<boolean> {
    const r = await this.pool.query('INSERT INTO exec_requests (sandbox_id, request_id, command_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [
      sandboxId,
      requestId,
      commandId,
    ]);
    return (r.rowCount ?? 0) > 0;
  }

  async deleteExecRequest(sandboxId: string, requestId: string): Promise<void> {
    await this.pool.query('DELETE FROM exec_requests WHERE sandbox_id = $1 AND request_id = $2', [sandboxId, requestId]);
  }

  async deleteExecRequests(sandboxId: string): Promise<void> {
    await this.pool.query('DELETE FROM exec_requests WHERE sandbox_id = $1', [sandboxId]);
  }

  async putPool(p: PoolRecord): Promise<void> {
    await this.pool.query('INSERT INTO pools (id, doc) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET doc = excluded.doc', [p.id, p]);
  }

  async listPools(): Promise<PoolRecord[]> {
    return this.docs('SELECT doc FROM pools ORDER BY id', []);
  }

  async deletePool(id: string): Promise<void> {
    await this.pool.query('DELETE FROM pools WHERE id = $1', [id]);
  }

  async putKey(k: KeyRecord): Promise<void> {
    await this.pool.query(
      `INSERT INTO api_keys (hash, tenant, role, quota, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (hash) DO UPDATE SET tenant = excluded.tenant, role = excluded.role, quota = excluded.quota, created_at = excluded.created_at`,
      [k.hash, k.tenant, k.role, JSON.stringify(k.quota), k.createdAt],
    );
  }

  async deleteKeyByPrefix(hashPrefix: string): Promise<boolean> {
    return ((await this.pool.query('DELETE FROM api_keys WHERE substr(hash, 1, 16) = $1', [hashPrefix])).rowCount ?? 0) > 0;
  }

  async getKey(hash: string): Promise<KeyRecord | undefined> {
    const r = (
      await this.pool.query<{ hash: string; tenant: string; role: string; quota: KeyRecord['quota']; created_at: string }>(
        'SELECT * FROM api_keys WHERE hash = $1',
        [hash],
      )
    ).rows[0];
    if (!r) return undefined;
    return {
      hash: r.hash,
      tenant: r.tenant,
      role: r.role === 'admin' || r.role === 'builder' || r.role === 'runner' ? r.role : 'user',
      quota: r.quota,
      createdAt: Number(r.created_at),
    };
  }

  async appendAudit(entries: AuditEntry[]): Promise<void> {
    if (!entries.length) return;
    const col = <K extends keyof AuditEntry>(k: K): Array<AuditEntry[K]> => entries.map((e) => e[k]);
    await this.pool.query({
      name: 'audit-append',
      text: `INSERT INTO audit (at, key_id, tenant, method, path, sandbox, status, code)
       SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[])`,
      values: [entries.map((e) => Date.parse(e.at)), col('keyId'), col('tenant'), col('method'), col('path'), col('sandbox'), col('status'), col('code')],
    });
  }

  async listAudit(q: { limit: number; tenant?: string; sandbox?: string }): Promise<AuditEntry[]> {
    const r = await this.pool.query<{
      at: string;
      key_id: string | null;
      tenant: string | null;
      method: string;
      path: string;
      sandbox: string | null;
      status: number;
      code: string | null;
    }>('SELECT * FROM audit WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR sandbox = $2) ORDER BY seq DESC LIMIT $3', [
      q.tenant ?? null,
      q.sandbox ?? null,
      q.limit,
    ]);
    return r.rows.map((x) => ({
      at: new Date(Number(x.at)).toISOString(),
      keyId: x.key_id,
      tenant: x.tenant,
      method: x.method,
      path: x.path,
      sandbox: x.sandbox,
      status: x.status,
      code: x.code,
    }));
  }

  async getImage(name: string): Promise<Image | undefined> {
    return (await this.docs<Image>('SELECT doc FROM images WHERE name = $1', [name]))[0];
  }

  async listImages(): Promise<Image[]> {
    return this.docs('SELECT doc FROM images ORDER BY name', []);
  }

  async putImage(image: Image): Promise<void> {
    await this.tx(async (c) => {
      await c.query(
        'INSERT INTO images (name, tenant, doc) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, doc = excluded.doc',
        [image.name, image.tenant, image],
      );
      await c.query('DELETE FROM image_layers WHERE image = $1', [image.name]);
      await c.query('INSERT INTO image_layers (image, digest) SELECT $1, d FROM unnest($2::text[]) AS t (d) ON CONFLICT DO NOTHING', [
        image.name,
        image.layers,
      ]);
    });
  }

  async deleteImage(name: string): Promise<boolean> {
    return ((await this.pool.query('DELETE FROM images WHERE name = $1', [name])).rowCount ?? 0) > 0;
  }

  async getLayerName(name: string): Promise<LayerNameRow | undefined> {
    const r = (await this.pool.query<LayerNameDbRow>('SELECT * FROM layer_names WHERE name = $1', [name])).rows[0];
    return r ? layerName(r) : undefined;
  }

  async listLayerNames(): Promise<LayerNameRow[]> {
    return (await this.pool.query<LayerNameDbRow>('SELECT * FROM layer_names ORDER BY name')).rows.map(layerName);
  }

  async putLayerName(row: LayerNameRow): Promise<void> {
    await this.pool.query(
      `INSERT INTO layer_names (name, digest, tenant, created_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, tenant = excluded.tenant, created_at = excluded.created_at`,
      [row.name, row.digest, row.tenant, row.createdAt],
    );
  }

  async deleteLayerName(name: string): Promise<boolean> {
    return ((await this.pool.query('DELETE FROM layer_names WHERE name = $1', [name])).rowCount ?? 0) > 0;
  }

  async layerSource(diffId: string): Promise<string | undefined> {
    return (await this.pool.query<{ digest: string }>('SELECT digest FROM layer_sources WHERE diff_id = $1', [diffId])).rows[0]?.digest;
  }

  async putLayerSource(diffId: string, digest: string): Promise<void> {
    await this.pool.query('INSERT INTO layer_sources (diff_id, digest) VALUES ($1, $2) ON CONFLICT (diff_id) DO UPDATE SET digest = excluded.digest', [
      diffId,
      digest,
    ]);
  }

  async deleteLayerSources(digests: string[]): Promise<void> {
    await this.pool.query('DELETE FROM layer_sources WHERE digest = ANY($1::text[])', [digests]);
  }

  async holdsLayer(digest: string, tenant?: string): Promise<boolean> {
    // A tenant (null: any) may use what is every tenant's (tenant NULL) or its own.
    const r = await this.pool.query(
      `SELECT 1 FROM image_layers il JOIN images i ON i.name = il.image WHERE il.digest = $1 AND ($2::text IS NULL OR i.tenant IS NULL OR i.tenant = $2)
       UNION ALL SELECT 1 FROM layer_names WHERE digest = $1 AND ($2::text IS NULL OR tenant IS NULL OR tenant = $2) LIMIT 1`,
      [digest, tenant ?? null],
    );
    return r.rows.length > 0;
  }

  async namedLayers(): Promise<Set<string>> {
    const r = await this.pool.query<{ digest: string }>('SELECT digest FROM image_layers UNION SELECT digest FROM layer_names');
    return new Set(r.rows.map((x) => x.digest));
  }

  async putNode(n: Omit<NodeRecord, 'heartbeatAt' | 'silentMs' | 'state' | 'joinedAt'>): Promise<void> {
    await this.pool.query(
      `INSERT INTO nodes (id, boot, state, heartbeat_at, doc) VALUES ($1, $2, 'joining', ${NOW_MS}, jsonb_set($3::jsonb, '{joinedAt}', to_jsonb(${NOW_MS})))
       ON CONFLICT (id) DO UPDATE SET boot = excluded.boot, state = CASE nodes.state WHEN 'draining' THEN 'draining' ELSE 'joining' END, heartbeat_at = excluded.heartbeat_at, doc = excluded.doc`,
      [n.id, n.boot, JSON.stringify({ address: n.address, token: n.token, tlsFingerprint: n.tlsFingerprint, info: n.info, load: n.load })],
    );
  }

  async heartbeatNodes(beats: Array<{ id: string; boot: string; load: unknown }>): Promise<boolean[]> {
    if (!beats.length) return [];
    const r = await this.pool.query<{ id: string; boot: string }>(
      `UPDATE nodes n SET heartbeat_at = ${NOW_MS}, doc = jsonb_set(n.doc, '{load}', b.load)
       FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS b(id, boot, load)
       WHERE n.id = b.id AND n.boot = b.boot AND n.state <> 'down' RETURNING n.id, n.boot`,
      [beats.map((b) => b.id), beats.map((b) => b.boot), beats.map((b) => JSON.stringify(b.load))],
    );
    const took = new Set(r.rows.map((x) => `${x.id}\0${x.boot}`));
    return beats.map((b) => took.has(`${b.id}\0${b.boot}`));
  }

  async seeReplica(id: string, url: string): Promise<void> {
    await this.pool.query(`INSERT INTO replicas (id, url, seen_at) VALUES ($1, $2, ${NOW_MS}) ON CONFLICT (id) DO UPDATE SET url = $2, seen_at = ${NOW_MS}`, [
      id,
      url,
    ]);
  }

  async liveReplicas(withinMs: number, except: string): Promise<Array<{ id: string; url: string }>> {
    // Long gone ones are forgotten here too (replicas come and go with deployments).
    await this.pool.query(`DELETE FROM replicas WHERE seen_at < ${NOW_MS} - 86400000`);
    const r = await this.pool.query<{ id: string; url: string }>(`SELECT id, url FROM replicas WHERE seen_at >= ${NOW_MS} - $1 AND id <> $2 ORDER BY id`, [
      withinMs,
      except,
    ]);
    return r.rows;
  }

  async listNodes(): Promise<NodeRecord[]> {
    return (await this.pool.query<NodeRow>(`SELECT ${NODE_COLUMNS} FROM nodes ORDER BY id`)).rows.map(nodeOf);
  }

  async getNode(id: string): Promise<NodeRecord | undefined> {
    const r = (await this.pool.query<NodeRow>(`SELECT ${NODE_COLUMNS} FROM nodes WHERE id = $1`, [id])).rows[0];
    return r ? nodeOf(r) : undefined;
  }

  async setNodeState(id: string, state: NodeState, o: { from?: NodeState[] } = {}): Promise<boolean> {
    const r = await this.pool.query('UPDATE nodes SET state = $2 WHERE id = $1 AND ($3::text[] IS NULL OR state = ANY($3::text[]))', [
      id,
      state,
      o.from ?? null,
    ]);
    return (r.rowCount ?? 0) > 0;
  }

  async markNodesDown(silentMs: number): Promise<string[]> {
    const r = await this.pool.query<{ id: string }>(`UPDATE nodes SET state = 'down' WHERE state <> 'down' AND heartbeat_at < ${NOW_MS} - $1 RETURNING id`, [
      silentMs,
    ]);
    return r.rows.map((x) => x.id);
  }

  async failLiveOnNode(node: string, error: { code: string; message: string }, end: SandboxEndRecord): Promise<string[]> {
    const r = await this.pool.query<{ id: string }>(
      `UPDATE sandboxes SET state = 'failed', doc = doc || jsonb_build_object('state', 'failed', 'error', $2::jsonb, 'end', $3::jsonb) WHERE node = $1 AND ${LIVE} RETURNING id`,
      [node, JSON.stringify(error), JSON.stringify(end)],
    );
    return r.rows.map((x) => x.id);
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/**
 * A failure to reach the database (refused, dropped, shutting down or starting up) as the API's
 * `unavailable`, which a client retries; any other error as it was.
 */
function unreachable(e: unknown): never {
  const code = (e as { code?: unknown } | null)?.code;
  const message = e instanceof Error ? e.message : String(e);
  const lost =
    (typeof code === 'string' && (/^(ECONNREFUSED|ECONNRESET|ENOENT|EPIPE|ETIMEDOUT)$/.test(code) || /^(08|57P0)/.test(code))) ||
    /Connection terminated|connection timeout|Client has encountered a connection error/i.test(message);
  if (lost) throw new WarrenError('unavailable', `the database is not answering (${message}); try again`, {}, { cause: e });
  throw e;
}

/** A tenant's live sandboxes and what they ask for, summed in the database. */
async function usageOf(q: Queryable, tenant: string): Promise<TenantUsage> {
  const r = await q.query<{ n: string; cpu: number | null; mem: number | null }>(
    `SELECT count(*) AS n, sum((doc -> 'resources' ->> 'cpu')::float8) AS cpu, sum((doc -> 'resources' ->> 'memoryMiB')::float8) AS mem
     FROM sandboxes WHERE tenant = $1 AND ${LIVE}`,
    [tenant],
  );
  const row = r.rows[0];
  return { sandboxes: Number(row?.n ?? 0), cpu: row?.cpu ?? 0, memoryMiB: row?.mem ?? 0 };
}
