import { type z } from 'zod';
import * as s from './sandbox.js';
import * as x from './exec.js';
import * as f from './files.js';
import * as i from './images.js';
import * as o from './ops.js';
import * as p from './pools.js';
import * as fn from './fn.js';
import * as d from './display.js';
import * as l from './leases.js';
import * as ev from './events.js';
import * as fk from './forks.js';
import * as sn from './snapshots.js';

/** One HTTP route of the contract: the server validates with these schemas, OpenAPI is made from them. */
export interface RouteSpec {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  summary: string;
  query?: z.ZodType;
  body?: z.ZodType;
  /** Content type of a raw (non-JSON) request body. */
  rawBody?: string;
  /** The largest JSON body taken (default 32 MiB). */
  maxBodyBytes?: number;
  response?: z.ZodType;
  /** Content type of a raw or streamed response. */
  rawResponse?: string;
  status: number;
}

/**
 * A route with its own schemas' types kept (the server hands a handler its query and body typed by
 * them) and its path as a literal type (its `{name}` segments type the path parameters both sides use).
 */
const r = <const S extends RouteSpec>(spec: S): S => spec;

/** Every route of the Warren API, keyed by operation name. */
export const ROUTES = {
  createSandbox: r({ method: 'POST', path: '/v1/sandboxes', summary: 'Create a sandbox', body: s.CreateSandboxRequest, response: s.Sandbox, status: 201 }),
  batchCreate: r({
    method: 'POST',
    path: '/v1/sandboxes/batch',
    summary: 'Create N sandboxes from one template',
    body: s.BatchCreateRequest,
    response: s.BatchCreateResponse,
    status: 201,
  }),
  listSandboxes: r({
    method: 'GET',
    path: '/v1/sandboxes',
    summary: 'List sandboxes (label=k=v repeatable, state, lease, image, limit, cursor)',
    query: s.ListSandboxesQuery,
    response: s.ListSandboxesResponse,
    status: 200,
  }),
  getSandbox: r({ method: 'GET', path: '/v1/sandboxes/{id}', summary: 'Get a sandbox', response: s.Sandbox, status: 200 }),
  deleteSandbox: r({ method: 'DELETE', path: '/v1/sandboxes/{id}', summary: 'Delete a sandbox (idempotent)', status: 204 }),
  sandboxEvents: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/events',
    summary: `A sandbox's lifecycle events as kept (an hour at least), oldest first, at most ${ev.MAX_SANDBOX_EVENTS} (read on with since=the last seq); readable while its record is, after it ended too`,
    query: ev.SandboxEventsQuery,
    response: ev.SandboxEventsResponse,
    status: 200,
  }),
  setTimeout: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/timeout',
    summary: 'Set a new TTL from now',
    body: s.SetTimeoutRequest,
    response: s.Sandbox,
    status: 200,
  }),
  pause: r({ method: 'POST', path: '/v1/sandboxes/{id}/pause', summary: 'Freeze a sandbox', response: s.StateResponse, status: 200 }),
  resume: r({ method: 'POST', path: '/v1/sandboxes/{id}/resume', summary: 'Thaw a sandbox', response: s.StateResponse, status: 200 }),
  setNetwork: r({
    method: 'PATCH',
    path: '/v1/sandboxes/{id}/network',
    summary: 'Replace the network rules of a running sandbox; new connections follow them at once',
    body: s.NetworkPolicyBody,
    response: s.Sandbox,
    status: 200,
  }),
  portProxy: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/ports/{port}/{path}',
    summary:
      "Any method: HTTP (and a WebSocket upgrade) proxied to that port on the sandbox's address, with the caller's key (which is not passed on); 502 unavailable when nothing listens there",
    rawResponse: '*/*',
    status: 200,
  }),
  commit: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/commit',
    summary: 'Turn the writable layer (minus exclude paths and platform residues) into a new layer over the current ones: a new image',
    body: i.CommitRequest,
    response: i.Image,
    status: 201,
  }),
  forkSandbox: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/fork',
    summary:
      "Fork a running or paused sandbox into `count` new ones with its filesystem state now (a microVM's memory too; a container's processes are not copied): the source runs on",
    body: fk.ForkRequest,
    response: fk.ForkResponse,
    status: 201,
  }),
  createSnapshot: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/snapshots',
    summary: "Keep a sandbox's files now as a named snapshot that outlives it (frozen meanwhile; it runs on): an image a create names as `snapshot`",
    body: sn.CreateSnapshotRequest,
    response: sn.Snapshot,
    status: 201,
  }),
  listSnapshots: r({
    method: 'GET',
    path: '/v1/snapshots',
    summary: "This tenant's snapshots",
    query: sn.ListSnapshotsQuery,
    response: sn.ListSnapshotsResponse,
    status: 200,
  }),
  deleteSnapshot: r({
    method: 'DELETE',
    path: '/v1/snapshots/{name}',
    summary:
      "Delete a snapshot; its layers are freed when nothing else uses them. Refused (conflict, details {image, sandboxes}) while live sandboxes of the caller's tenant (an admin's: any tenant's) were created from it, unless force=1: they keep its layers while they live",
    query: i.DeleteImageQuery,
    status: 204,
  }),
  screen: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/screen',
    summary: "A full VM's display now, as a PNG (backend vm; others answer invalid_argument); a paused VM is resumed first",
    rawResponse: 'image/png',
    status: 200,
  }),
  input: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/input',
    summary: "Keys, text and mouse events to a full VM's display, in order (backend vm); the pointer is absolute, in the screen's pixels",
    body: d.InputRequest,
    status: 204,
  }),
  batchPause: r({
    method: 'POST',
    path: '/v1/batch/pause',
    summary: 'Pause every sandbox with these labels',
    body: s.BatchByLabelsRequest,
    response: s.CountResponse,
    status: 200,
  }),
  batchResume: r({
    method: 'POST',
    path: '/v1/batch/resume',
    summary: 'Resume every sandbox with these labels',
    body: s.BatchByLabelsRequest,
    response: s.CountResponse,
    status: 200,
  }),
  batchDelete: r({
    method: 'POST',
    path: '/v1/batch/delete',
    summary: 'Delete every sandbox with these labels',
    body: s.BatchByLabelsRequest,
    response: s.CountResponse,
    status: 200,
  }),
  exec: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/exec',
    summary: 'Run a command: NDJSON events (default) or one JSON result with Accept: application/json',
    body: x.ExecRequest,
    response: x.ExecResult,
    rawResponse: 'application/x-ndjson',
    status: 200,
  }),
  commandOutput: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/commands/{commandId}',
    summary: 'Re-read a command as NDJSON from a byte offset of its output',
    query: x.CommandOutputQuery,
    rawResponse: 'application/x-ndjson',
    status: 200,
  }),
  killCommand: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/commands/{commandId}/kill',
    summary: 'Signal a command and its process tree',
    body: x.KillRequest,
    status: 204,
  }),
  listCommands: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/commands',
    summary: `The commands the sandbox runs now (not those of its shell sessions), oldest first; finished=1: the finished ones its node keeps too (the newest ${x.MAX_FINISHED_COMMANDS_LISTED}), each with its exit`,
    query: x.ListCommandsQuery,
    response: x.CommandList,
    status: 200,
  }),
  resizeCommand: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/commands/{commandId}/resize',
    summary: 'Give the terminal of a command started with `pty` a new size',
    body: x.TerminalSize,
    status: 204,
  }),
  pty: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/pty',
    summary:
      'A login shell on a new terminal, over a WebSocket (Upgrade: websocket): binary messages are terminal bytes both ways; a text message {"type":"resize","cols","rows"} resizes it; at its end a text message {"type":"exit","exitCode","signal"} and a close. A browser (which cannot set Authorization on a WebSocket) offers its key as the subprotocol warren.bearer.<base64url(key)> beside warren, and the server answers with warren',
    query: x.PtyQuery,
    status: 101,
  }),
  commandStdin: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/commands/{commandId}/stdin',
    summary: 'Write to a command stdin (?eof=1 closes it); answers once the sandbox has taken the bytes (resource_exhausted when it does not)',
    query: x.CommandStdinQuery,
    rawBody: 'application/octet-stream',
    status: 204,
  }),
  createSession: r({
    method: 'POST',
    path: '/v1/sandboxes/{id}/sessions',
    summary: 'Start a shell session',
    body: x.CreateSessionRequest,
    response: x.CreateSessionResponse,
    status: 201,
  }),
  deleteSession: r({ method: 'DELETE', path: '/v1/sandboxes/{id}/sessions/{sessionId}', summary: 'End a shell session', status: 204 }),
  writeFile: r({
    method: 'PUT',
    path: '/v1/sandboxes/{id}/files',
    summary: 'Write a file (parents created)',
    query: f.WriteFileQuery,
    rawBody: 'application/octet-stream',
    status: 204,
  }),
  readFile: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/files',
    summary: 'Read a file',
    query: f.FilePathQuery,
    rawResponse: 'application/octet-stream',
    status: 200,
  }),
  deleteFile: r({ method: 'DELETE', path: '/v1/sandboxes/{id}/files', summary: 'Delete a file or directory', query: f.DeleteFileQuery, status: 204 }),
  listFiles: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/files/list',
    summary: 'List a directory',
    query: f.ListFilesQuery,
    response: f.ListFilesResponse,
    status: 200,
  }),
  statFile: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/files/stat',
    summary: 'Stat a path (symlinks are not followed)',
    query: f.FilePathQuery,
    response: f.FileEntry,
    status: 200,
  }),
  mkdir: r({ method: 'POST', path: '/v1/sandboxes/{id}/files/mkdir', summary: 'Make a directory and its parents', body: f.MkdirRequest, status: 204 }),
  move: r({ method: 'POST', path: '/v1/sandboxes/{id}/files/move', summary: 'Move a file or directory', body: f.MoveRequest, status: 204 }),
  putArchive: r({
    method: 'PUT',
    path: '/v1/sandboxes/{id}/archive',
    summary: 'Extract a tar into a directory',
    query: f.FilePathQuery,
    rawBody: 'application/x-tar',
    status: 204,
  }),
  getArchive: r({
    method: 'GET',
    path: '/v1/sandboxes/{id}/archive',
    summary: 'A tar of a directory',
    query: f.FilePathQuery,
    rawResponse: 'application/x-tar',
    status: 200,
  }),
  listImages: r({
    method: 'GET',
    path: '/v1/images',
    summary: "List images, each with usedBy: the live sandboxes created from it (the caller's tenant's; an admin's key: every tenant's)",
    response: i.ListImagesResponse,
    status: 200,
  }),
  importImage: r({
    method: 'POST',
    path: '/v1/images/import',
    summary: 'Import an OCI image layout or `docker save` tarball (gzip allowed); NDJSON progress, last line done or error',
    query: i.ImportImageQuery,
    rawBody: 'application/x-tar',
    rawResponse: 'application/x-ndjson',
    status: 200,
  }),
  pullImage: r({
    method: 'POST',
    path: '/v1/images/pull',
    summary: 'Pull an image from an OCI registry (layers converted before are not fetched again); NDJSON progress, last line done or error',
    body: i.PullImageRequest,
    rawResponse: 'application/x-ndjson',
    status: 200,
  }),
  putImage: r({
    method: 'PUT',
    path: '/v1/images/{name}',
    summary: 'Name an image as a stack of layer digests held by this node or its blob store (admin); layer metadata is fetched, data stays on demand',
    body: i.PutImageRequest,
    response: i.Image,
    status: 200,
  }),
  deleteImage: r({
    method: 'DELETE',
    path: '/v1/images/{name}',
    summary:
      'Delete an image name (admin); layers nothing else uses are freed. Refused (conflict, details {image, sandboxes}) while live sandboxes were created from it, unless force=1: they keep its layers while they live',
    query: i.DeleteImageQuery,
    status: 204,
  }),
  uploadLayer: r({
    method: 'POST',
    path: '/v1/layers',
    summary: 'Upload a standalone layer (a tar, gzip allowed; OCI whiteouts honoured), usable in `layers` at create',
    query: i.UploadLayerQuery,
    rawBody: 'application/x-tar',
    response: i.Layer,
    status: 201,
  }),
  publishLayers: r({
    method: 'POST',
    path: '/v1/layers/publish',
    summary: "Copy layers (an image's, or named ones) to a registry blob store, for nodes that read them on demand (admin)",
    body: i.PublishLayersRequest,
    response: i.PublishLayersResponse,
    status: 200,
  }),
  listBlobs: r({
    method: 'GET',
    path: '/v1/blobs/',
    summary: "This node's layer blobs as an HTML listing (admin): another node's blob store for on-demand layers",
    rawResponse: 'text/html',
    status: 200,
  }),
  getBlob: r({
    method: 'GET',
    path: '/v1/blobs/{file}',
    summary: 'One layer blob (`<hex>.erofs`, `<hex>.data` or `<hex>.blocks`), with byte ranges (admin)',
    rawResponse: 'application/octet-stream',
    status: 200,
  }),
  listLayers: r({ method: 'GET', path: '/v1/layers', summary: 'List named layers', response: i.ListLayersResponse, status: 200 }),
  deleteLayer: r({ method: 'DELETE', path: '/v1/layers/{name}', summary: 'Delete a layer name; its blob is freed when nothing else uses it', status: 204 }),
  listNodes: r({
    method: 'GET',
    path: '/v1/nodes',
    summary: 'List nodes: their addresses, capacity and load (admin)',
    response: o.ListNodesResponse,
    status: 200,
  }),
  joinNode: r({
    method: 'POST',
    path: '/v1/nodes/join',
    summary: 'An edge joins the cluster (the join token, not an API key)',
    body: o.JoinNodeRequest,
    response: o.JoinNodeResponse,
    status: 200,
  }),
  heartbeat: r({
    method: 'POST',
    path: '/v1/nodes/{id}/heartbeat',
    summary: "An edge's heartbeat: its load (the join token); 409 when it must join again",
    body: o.HeartbeatRequest,
    status: 204,
  }),
  drainNode: r({ method: 'POST', path: '/v1/nodes/{id}/drain', summary: 'Stop placing sandboxes on a node; its sandboxes run on (admin)', status: 204 }),
  undrainNode: r({ method: 'POST', path: '/v1/nodes/{id}/ready', summary: 'A drained node takes creates again (admin)', status: 204 }),
  audit: r({
    method: 'GET',
    path: '/v1/audit',
    summary: 'The newest mutating calls first: key, tenant, sandbox, outcome (admin)',
    query: o.AuditQuery,
    response: o.ListAuditResponse,
    status: 200,
  }),
  createKey: r({
    method: 'POST',
    path: '/v1/keys',
    summary: 'Create an API key (admin)',
    body: o.CreateKeyRequest,
    response: o.CreateKeyResponse,
    status: 201,
  }),
  deleteKey: r({
    method: 'DELETE',
    path: '/v1/keys/{keyId}',
    summary: 'Revoke an API key (admin): it stops working at once; idempotent',
    status: 204,
  }),
  info: r({ method: 'GET', path: '/v1/info', summary: 'What this server offers', response: o.Info, status: 200 }),
  metricsHistory: r({
    method: 'GET',
    path: '/v1/metrics/history',
    summary:
      "The last hour of this replica's samples (admin): creates, commands and FnCall calls per second, sandboxes running and paused, CPU and memory used",
    response: o.MetricsHistoryResponse,
    status: 200,
  }),
  createLease: r({
    method: 'POST',
    path: '/v1/leases',
    summary: 'Take a lease: sandboxes made with it are frozen within a second once it lapses, then paused or deleted',
    body: l.CreateLeaseRequest,
    maxBodyBytes: 64 * 1024,
    response: l.Lease,
    status: 201,
  }),
  listLeases: r({ method: 'GET', path: '/v1/leases', summary: "This tenant's leases", query: l.ListLeasesQuery, response: l.ListLeasesResponse, status: 200 }),
  getLease: r({ method: 'GET', path: '/v1/leases/{id}', summary: 'Get a lease', response: l.Lease, status: 200 }),
  renewLease: r({
    method: 'POST',
    path: '/v1/leases/{id}/renew',
    summary: 'Renew a lease: it lives ttlSeconds from now (conflict once it lapsed or was deleted)',
    body: l.RenewLeaseRequest,
    maxBodyBytes: 1024,
    response: l.Lease,
    status: 200,
  }),
  deleteLease: r({ method: 'DELETE', path: '/v1/leases/{id}', summary: 'End a lease and every sandbox made with it, at once (idempotent)', status: 204 }),
  events: r({
    method: 'GET',
    path: '/v1/events',
    summary:
      "This tenant's lifecycle events as server-sent events (text/event-stream): created, started, paused, resumed, ended (with why), lease_lapsed; each event's id is its seq, and a stream read again with `since` (or Last-Event-ID) misses nothing kept (an hour at least)",
    query: ev.EventsQuery,
    rawResponse: 'text/event-stream',
    status: 200,
  }),
  createPool: r({
    method: 'POST',
    path: '/v1/pools',
    summary: 'Keep `size` sandboxes of one spec ready; matching creates of this tenant claim them',
    body: p.CreatePoolRequest,
    response: p.Pool,
    status: 201,
  }),
  listPools: r({ method: 'GET', path: '/v1/pools', summary: "This tenant's warm pools", response: p.ListPoolsResponse, status: 200 }),
  deletePool: r({ method: 'DELETE', path: '/v1/pools/{id}', summary: 'Remove a pool and its unclaimed sandboxes', status: 204 }),
  fnRun: r({
    method: 'POST',
    path: '/v1/fn/run',
    summary: 'Run one stateless call (python, bash, node) in a warm FnCall worker',
    body: fn.FnRunRequest,
    response: fn.FnRunResult,
    status: 200,
  }),
  fnBatch: r({
    method: 'POST',
    path: '/v1/fn/batch',
    summary: 'Run many stateless calls; results in the order of the calls',
    body: fn.FnBatchRequest,
    maxBodyBytes: 256 * 1024 * 1024,
    response: fn.FnBatchResponse,
    status: 200,
  }),
  openapi: r({ method: 'GET', path: '/v1/openapi.json', summary: 'This document', status: 200 }),
} satisfies Record<string, RouteSpec>;

export type RouteName = keyof typeof ROUTES;
