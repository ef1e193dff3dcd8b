import type { IncomingMessage, ServerResponse } from 'node:http';
import type { PathParams, RouteSpec, z } from '@warren/api';
import type { ImageCatalogue } from '@warren/images';
import type { Auth } from '../services/auth.js';
import type { Caller, SandboxService } from '../services/sandboxes.js';
import type { ImageService } from '../services/images.js';
import type { PoolService } from '../services/pools.js';
import type { FnService } from '../services/fn.js';
import type { LeaseService } from '../services/leases.js';
import type { ForkService } from '../services/forks.js';
import type { SnapshotService } from '../services/snapshots.js';
import type { ImageUse } from '../services/image-use.js';
import type { EventLog } from '../services/events.js';
import type { Webhooks } from '../services/webhooks.js';
import type { AuditLog } from '../services/audit.js';
import type { CommandService } from '../services/commands.js';
import type { FileService } from '../services/files.js';
import type { NodeService } from '../services/nodes.js';
import type { MetricsHistory } from '../services/history.js';
import type { RouteContext } from './router.js';

type Parsed<T> = T extends z.ZodType ? z.infer<T> : undefined;

/**
 * A request that passed authentication; its path parameters are named by the route's template
 * (`/v1/sandboxes/{id}`: `c.params.id`, a string; a name the path does not have does not compile); `audit.sandbox` names the sandbox a call made (create).
 * Its query and JSON body are validated by the route's own schemas (ROUTES), in one place (the
 * `on` of app.ts), when the handler asks for them: after its own checks, so a caller without the
 * right learns nothing of what they should be.
 */
export type Authed<S extends RouteSpec = RouteSpec> = RouteContext<PathParams<S['path']>> & {
  caller: Caller;
  audit: { sandbox?: string };
  query: () => Parsed<S['query']>;
  body: () => Promise<Parsed<S['body']>>;
  /**
   * Answers with the route's own status (ROUTES: 200, 201, or 204 with no body) and its body,
   * typed by the route's response schema: no handler names a status of its own.
   */
  reply: (...body: S['response'] extends z.ZodType ? [z.input<S['response']>] : []) => void;
};

/** Registers an authenticated handler for a route of the contract. */
export type On = <S extends RouteSpec>(spec: S, h: (c: Authed<S>) => Promise<void>) => void;

export interface RouteDeps {
  version: string;
  auth: Auth;
  sandboxes: SandboxService;
  commands: CommandService;
  files: FileService;
  nodes: NodeService;
  catalogue: ImageCatalogue;
  images: ImageService;
  pools: PoolService;
  fn: FnService;
  leases: LeaseService;
  forks: ForkService;
  snapshots: SnapshotService;
  /** Who uses an image (its listing's usedBy, its delete's refusal). */
  imageUse: ImageUse;
  events: EventLog;
  /** The operator's webhooks (for /metrics). */
  webhooks?: Webhooks;
  audit: AuditLog;
  /** This replica's recent samples (GET /v1/metrics/history); absent: none kept. */
  history?: MetricsHistory;
  logger: { warn(msg: string, meta?: unknown): void };
  /** Sends a blob this process lacks from another replica's blobs; false when none has it. */
  peerBlob?: (name: string, req: IncomingMessage, res: ServerResponse) => Promise<boolean>;
}
