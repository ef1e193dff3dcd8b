export { ERROR_CODES, STATUS_BY_CODE, WarrenError, parseError, serializeError } from './errors.js';
export type { ErrorBody, ErrorCode, ErrorDetails } from './errors.js';
export {
  AbsPath,
  Backend,
  BatchByLabelsRequest,
  BatchCreateRequest,
  BatchCreateResponse,
  CountResponse,
  CpuClass,
  CreateSandboxRequest,
  Env,
  FileSpec,
  Labels,
  Lifetime,
  ListSandboxesQuery,
  ListSandboxesResponse,
  NetworkPolicyBody,
  Resources,
  END_BY,
  Sandbox,
  SandboxEnd,
  SandboxEndReason,
  SandboxState,
  SetTimeoutRequest,
  StateResponse,
  UserName,
} from './sandbox.js';
export { ENDPOINT_DOMAIN, EndpointName, NetworkPolicy, NetworkUsage, SandboxNetwork, formatIpv4, parseIpv4, parseNetworkRule, prefixMask } from './network.js';
export type { NetworkRule } from './network.js';
export {
  CommandOutputQuery,
  CommandStdinQuery,
  CreateSessionRequest,
  CreateSessionResponse,
  ExecEvent,
  ExecRequest,
  ExecResult,
  KilledBy,
  KillRequest,
  LimitHit,
  MAX_QUEUED_SESSION_COMMANDS,
  TerminalSize,
  CommandInfo,
  CommandList,
  ListCommandsQuery,
  MAX_FINISHED_COMMANDS_LISTED,
  PtyQuery,
} from './exec.js';
export type { ExitEvent } from './exec.js';
export { DeleteFileQuery, FileEntry, QueryFlag, FilePathQuery, ListFilesQuery, ListFilesResponse, MkdirRequest, MoveRequest, WriteFileQuery } from './files.js';
export {
  Image,
  DeleteImageQuery,
  ListedImage,
  ListImagesResponse,
  ImageName,
  ImportImageQuery,
  UploadLayerQuery,
  Layer,
  ListLayersResponse,
  ImageEvent,
  CommitRequest,
  PullImageRequest,
  RegistryAuth,
  PutImageRequest,
  PublishLayersRequest,
  PublishLayersResponse,
} from './images.js';
export { CreatePoolRequest, ListPoolsResponse, Pool } from './pools.js';
export { CreateSnapshotRequest, ListSnapshotsQuery, ListSnapshotsResponse, MAX_SNAPSHOTS_PER_TENANT, Snapshot } from './snapshots.js';
export { ForkRequest, ForkResponse, MAX_FORK_COUNT } from './forks.js';
export {
  EventsQuery,
  LifecycleEvent,
  LifecycleEventType,
  MAX_SANDBOX_EVENTS,
  SandboxEventsQuery,
  SandboxEventsResponse,
  WebhookBody,
  WebhookEvent,
} from './events.js';
export { CreateLeaseRequest, Lease, LeaseOnExpiry, LeaseState, ListLeasesQuery, ListLeasesResponse, RenewLeaseRequest } from './leases.js';
export { InputEvent, InputRequest, MAX_INPUT_KEYSTROKES } from './display.js';
export { FnBatchRequest, FnBatchResponse, FnFile, FnLanguage, FnRunRequest, FnRunResult } from './fn.js';
export {
  AuditEntry,
  AuditQuery,
  CreateKeyRequest,
  CreateKeyResponse,
  Info,
  KeyRole,
  ListAuditResponse,
  ListNodesResponse,
  Node,
  NodeState,
  NodeLoad,
  NodeName,
  JoinNodeRequest,
  JoinNodeResponse,
  HeartbeatRequest,
  Quota,
  HistoryPoint,
  MetricsHistoryResponse,
} from './ops.js';
export { DEFAULT_PATH, sandboxEnv } from './env.js';
export { DEFAULTS, defaultMemoryRequestMiB, memoryRequestOf } from './defaults.js';
export { ROUTES } from './routes.js';
export type { RouteName, RouteSpec } from './routes.js';
export { routePath } from './route-path.js';
export type { PathParamNames, PathParams } from './route-path.js';
export { CONTRACT_NOTES, buildOpenApi } from './openapi.js';
export { z } from 'zod';
export { WS_MAX_FRAGMENTS, WS_OPCODE, WsDecoder, WsProtocolError, wsAccept, wsClosePayload, wsFrame, wsKey, type WsMessage } from './websocket.js';
export { randomText } from './random.js';
