import type Database from 'better-sqlite3';
import type { AuditEntry, SandboxState } from '@warren/api';
import type { SandboxRecord, TenantUsage } from './store.js';
import { liveFlag } from './sqlite-live.js';

type Row = { doc: string };
type Patch = Partial<Pick<SandboxRecord, 'state' | 'expiresAt' | 'lastActivityAt' | 'error' | 'network' | 'node' | 'end' | 'layers'>>;
type End = Pick<SandboxRecord, 'state' | 'error' | 'end'>;

/** The statements these writes run, prepared by the store. */
export interface SandboxStatements {
  insert: Database.Statement<[string, string, string, string, 0 | 1, number, string | null | undefined, string | null, string]>;
  insertLabel: Database.Statement<[string, string, string]>;
  update: Database.Statement<[string, 0 | 1, string, string, string]>;
  markStarted: Database.Statement<[string]>;
  setDoc: Database.Statement<[string, string]>;
  get: Database.Statement<[string], Row>;
  live: Database.Statement<[string], Row>;
  deleteExecRequests: Database.Statement<[string]>;
  audit: Database.Statement<[number, string | null, string | null, string, string, string | null, number, string | null]>;
}

type Tx<F extends (...args: never[]) => unknown> = Database.Transaction<F>;

/** The sandbox record's writes (see sandboxWrites). */
export interface SandboxWrites {
  insert: Tx<(rs: SandboxRecord[], tenant: string, admit: ((usage: TenantUsage) => void) | undefined) => void>;
  markStarted: Tx<(ids: string[]) => string[]>;
  update: Tx<(id: string, patch: Patch, from: SandboxState[] | undefined) => boolean>;
  end: Tx<(id: string, end: End, tenant: string | undefined) => SandboxRecord | undefined>;
  activity: Tx<(entries: Array<{ id: string; at: number }>) => void>;
  audit: Tx<(entries: AuditEntry[]) => void>;
  failLive: Tx<(node: string, error: { code: string; message: string }, end: SandboxRecord['end']) => string[]>;
}

/**
 * The writes a sandbox's life makes (its record, its start, its changes and end, the audit log),
 * each a transaction made once: better-sqlite3's `db.transaction(fn)` builds the transaction's
 * five wrappers at every call (8–13 µs here), and a create made two or three of them. Each runs
 * with `.immediate()` (the write lock taken first) or as a deferred transaction as before.
 */
export function sandboxWrites(db: Database.Database, s: SandboxStatements, usageOf: (tenant: string) => TenantUsage): SandboxWrites {
  return {
    insert: db.transaction((rs: SandboxRecord[], tenant: string, admit: ((usage: TenantUsage) => void) | undefined) => {
      if (admit) admit(usageOf(tenant));
      // Recorded at by this store's clock (staleCreating), whatever the record's says.
      const at = Date.now();
      for (const r of rs) {
        s.insert.run(r.id, r.tenant, r.node, r.state, liveFlag(r.state), at, r.requestId, r.lease ?? null, JSON.stringify(r));
        for (const [k, v] of Object.entries(r.labels)) s.insertLabel.run(r.id, k, v);
      }
    }),
    markStarted: db.transaction((ids: string[]) => ids.filter((id) => s.markStarted.run(id).changes === 1)),
    update: db.transaction((id: string, patch: Patch, from: SandboxState[] | undefined): boolean => {
      const row = s.get.get(id);
      if (!row) return false;
      const cur = JSON.parse(row.doc) as SandboxRecord;
      if (from && !from.includes(cur.state)) return false;
      const next = { ...cur, ...patch };
      s.update.run(next.state, liveFlag(next.state), next.node, JSON.stringify(next), id);
      return true;
    }),
    end: db.transaction((id: string, end: End, tenant: string | undefined): SandboxRecord | undefined => {
      const row = s.get.get(id);
      if (!row) return undefined;
      const cur = JSON.parse(row.doc) as SandboxRecord;
      if (tenant !== undefined && cur.tenant !== tenant) return undefined;
      if (cur.state === 'creating' || cur.state === 'running' || cur.state === 'paused') {
        const next = Object.assign({}, cur, { state: end.state, error: end.error, end: end.end ?? null });
        s.update.run(next.state, liveFlag(next.state), next.node, JSON.stringify(next), id);
      }
      s.deleteExecRequests.run(id);
      return cur;
    }),
    activity: db.transaction((entries: Array<{ id: string; at: number }>) => {
      for (const e of entries) {
        const row = s.get.get(e.id);
        if (!row) continue;
        // The document alone: no indexed column changes (every column SET rewrites the indexes naming it).
        s.setDoc.run(JSON.stringify(Object.assign(JSON.parse(row.doc) as SandboxRecord, { lastActivityAt: e.at })), e.id);
      }
    }),
    audit: db.transaction((entries: AuditEntry[]) => {
      for (const e of entries) s.audit.run(Date.parse(e.at), e.keyId, e.tenant, e.method, e.path, e.sandbox, e.status, e.code);
    }),
    failLive: db.transaction((node: string, error: { code: string; message: string }, end: SandboxRecord['end']): string[] => {
      const ids: string[] = [];
      for (const row of s.live.all(node)) {
        const rec = { ...(JSON.parse(row.doc) as SandboxRecord), state: 'failed' as const, error, end };
        s.update.run('failed', 0, rec.node, JSON.stringify(rec), rec.id);
        ids.push(rec.id);
      }
      return ids;
    }),
  };
}
