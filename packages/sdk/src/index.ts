export { Warren, Sandboxes, Pools, Fn, connect } from './client.js';
export { Lease, Leases, type LeaseOptions } from './leases.js';
export { serverSentEvents, type EventsOptions, type SseMessage } from './events.js';
export type { ImageProgress, ListOptions } from './client.js';
export type { Body } from './node-http.js';
export { Sandbox, SandboxFiles, Shell } from './sandbox.js';
export { SandboxEndedError } from './sandbox-ended.js';
export { Terminal, type TerminalExit } from './terminal.js';
export type { CreateOptions, ExecOptions } from './sandbox.js';
export type { ClientOptions, FetchLike } from './transport.js';
export { WarrenError } from '@warren/api';
export type {
  AuditEntry,
  ErrorCode,
  ExecEvent,
  ExecResult,
  FileEntry,
  FnBatchResponse,
  FnRunRequest,
  FnRunResult,
  Image,
  ImageEvent,
  Layer,
  LimitHit,
  Pool,
  Sandbox as SandboxInfo,
} from '@warren/api';
