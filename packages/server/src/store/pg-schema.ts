// PostgreSQL's tables for PgStore (leases, events and webhook cursors make their own).

/**
 * The tables, as in SqliteStore; documents as jsonb. Several replicas may start at once: see open.
 * No index of `sandboxes` names `state`, and its pages are half filled: a change of state among
 * the live ones (a create marked running, a pause) or of the document alone (activity times) is a
 * HOT update, one new row version on the same page and no index entries. What the indexes need of
 * the state is the generated `live` (changed only by an end), and the creates not yet marked
 * running are listed in `sandbox_creates` (written with the record, removed by the mark) for
 * staleCreating.
 */
export const PG_SCHEMA = `
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  node TEXT NOT NULL,
  state TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  request_id TEXT,
  doc JSONB NOT NULL
) WITH (fillfactor = 50);
DO $$ BEGIN
  -- A table made before: altered once (not at every start: an ALTER waits for every statement on it).
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'sandboxes' AND column_name = 'live') THEN
    ALTER TABLE sandboxes SET (fillfactor = 50);
    ALTER TABLE sandboxes ADD COLUMN live BOOLEAN GENERATED ALWAYS AS (state IN ('creating', 'running', 'paused')) STORED;
  END IF;
END $$;
CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes (tenant, id);
CREATE INDEX IF NOT EXISTS sandboxes_live_on_node ON sandboxes (node) WHERE live;
CREATE UNIQUE INDEX IF NOT EXISTS sandboxes_request ON sandboxes (tenant, request_id) WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS sandbox_creates (id TEXT PRIMARY KEY, created_at BIGINT NOT NULL);
-- Creates in flight that are not listed (a database made before, or creates an older replica made
-- while the replicas were being upgraded one by one), listed at every start; the indexes by state
-- (which an older replica's start makes again) go.
INSERT INTO sandbox_creates (id, created_at) SELECT id, created_at FROM sandboxes WHERE state = 'creating' ON CONFLICT DO NOTHING;
DROP INDEX IF EXISTS sandboxes_state;
DROP INDEX IF EXISTS sandboxes_node;
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
CREATE TABLE IF NOT EXISTS pools (id TEXT PRIMARY KEY, doc JSONB NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (
  hash TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  role TEXT NOT NULL,
  quota JSONB NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
  seq BIGSERIAL PRIMARY KEY,
  at BIGINT NOT NULL,
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
CREATE TABLE IF NOT EXISTS images (name TEXT PRIMARY KEY, tenant TEXT, doc JSONB NOT NULL);
CREATE TABLE IF NOT EXISTS image_layers (
  image TEXT NOT NULL REFERENCES images (name) ON DELETE CASCADE,
  digest TEXT NOT NULL,
  PRIMARY KEY (image, digest)
);
CREATE INDEX IF NOT EXISTS image_layers_digest ON image_layers (digest);
CREATE TABLE IF NOT EXISTS layer_names (name TEXT PRIMARY KEY, digest TEXT NOT NULL, tenant TEXT, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS layer_names_digest ON layer_names (digest);
CREATE TABLE IF NOT EXISTS layer_sources (diff_id TEXT PRIMARY KEY, digest TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS layer_sources_digest ON layer_sources (digest);
CREATE TABLE IF NOT EXISTS nodes (
  id TEXT PRIMARY KEY,
  boot TEXT NOT NULL,
  state TEXT NOT NULL,
  heartbeat_at BIGINT NOT NULL,
  doc JSONB NOT NULL
);
CREATE TABLE IF NOT EXISTS replicas (id TEXT PRIMARY KEY, url TEXT NOT NULL, seen_at BIGINT NOT NULL);
`;
