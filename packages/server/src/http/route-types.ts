import type { RouteSpec } from '@warren/api';
import type { ImageCatalogue } from '@warren/images';
import type { Auth } from '../services/auth.js';
import type { Caller, SandboxService } from '../services/sandboxes.js';
import type { ImageService } from '../services/images.js';
import type { PoolService } from '../services/pools.js';
import type { FnService } from '../services/fn.js';
import type { AuditLog } from '../services/audit.js';
import type { CommandService } from '../services/commands.js';
import type { FileService } from '../services/files.js';
import type { NodeService } from '../services/nodes.js';
import type { RouteContext } from './router.js';

/** A request that passed authentication; `audit.sandbox` names the sandbox a call made (create). */
export type Authed = RouteContext & { caller: Caller; audit: { sandbox?: string } };

/** Registers an authenticated handler for a route of the contract. */
export type On = (spec: RouteSpec, h: (c: Authed) => Promise<void>) => void;

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
  audit: AuditLog;
  logger: { warn(msg: string, meta?: unknown): void };
}

export const sandboxId = (c: Authed): string => c.params.id ?? '';

/** The id of the caller's sandbox named in the path, which must be live on this node. */
export const liveSandboxId = async (d: RouteDeps, c: Authed): Promise<string> => (await d.sandboxes.live(c.caller, sandboxId(c))).id;
