import { DEFAULTS } from './defaults.js';
import { z } from 'zod';
import { NetworkPolicy, SandboxNetwork } from './network.js';

const name = z.string().min(1).max(256);
const labelKey = z.string().regex(/^[A-Za-z0-9._\-/]{1,63}$/, 'label keys are 1-63 of [A-Za-z0-9._-/]');
const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,255}$/, 'environment names are [A-Za-z_][A-Za-z0-9_]*');
const absPath = z
  .string()
  .min(1)
  .max(4096)
  .regex(/^\/[^\0]*$/, 'paths are absolute and contain no NUL');

/** A user inside the sandbox: a name from its /etc/passwd, or a numeric uid. */
export const UserName = z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$/, 'a user name or uid');

export const Labels = z.record(labelKey, z.string().max(256));
export const Env = z.record(envName, z.string().max(128 * 1024));
export const AbsPath = absPath;

/**
 * How a sandbox's CPU time is shared with the node's others. `latency` (the default): a full
 * CPU weight, as any process. `batch`: the lowest weight the kernel has and SCHED_IDLE, so it runs
 * on what the node's latency sandboxes leave idle and a node saturated by batch work still answers
 * a latency sandbox at once; FnCall's bulk calls (POST /v1/fn/batch) run so, and so does every
 * sandbox of a key an operator marked batch (its quota's `cpuClass`). Its `cpu` limit stands.
 */
export const CpuClass = z.enum(['latency', 'batch']);
export type CpuClass = z.infer<typeof CpuClass>;

export const Resources = z.strictObject({
  cpu: z.number().positive().max(1024).optional().meta({ default: DEFAULTS.sandbox.resources.cpu }),
  memoryMiB: z
    .number()
    .int()
    .min(16)
    .max(4 * 1024 * 1024)
    .optional()
    .meta({ default: DEFAULTS.sandbox.resources.memoryMiB, description: 'the hard limit: past it the kernel OOM-kills inside the sandbox' }),
  memoryRequestMiB: z
    .number()
    .int()
    .min(1)
    .max(4 * 1024 * 1024)
    .optional()
    .describe(
      `what the node commits for the sandbox (admission counts requests, not limits); at most memoryMiB; default: ${DEFAULTS.memoryRequestFraction} of memoryMiB, rounded up`,
    ),
  diskMiB: z.number().int().min(1).optional(),
  pids: z.number().int().min(8).max(1_000_000).optional().meta({ default: DEFAULTS.sandbox.resources.pids }),
  cpuClass: CpuClass.optional().meta({ default: DEFAULTS.sandbox.resources.cpuClass }),
});
export type Resources = z.infer<typeof Resources>;

export const Lifetime = z.strictObject({
  ttlSeconds: z
    .number()
    .int()
    .min(1)
    .max(30 * 86400)
    .optional()
    .meta({ default: DEFAULTS.sandbox.ttlSeconds }),
  idleTimeoutSeconds: z
    .number()
    .int()
    .min(1)
    .max(30 * 86400)
    .optional(),
  pauseAfterIdleSeconds: z
    .number()
    .int()
    .min(1)
    .max(30 * 86400)
    .optional(),
  /** Whether time spent paused counts against ttlSeconds (default false: a paused sandbox's TTL stands still). */
  ttlCountsPaused: z.boolean().optional(),
});

/** The body of PATCH /v1/sandboxes/{id}/network: the whole new rule set. */
export const NetworkPolicyBody = NetworkPolicy;

export const FileSpec = z.strictObject({
  path: absPath,
  content: z.base64().describe('file content, base64'),
  mode: z.number().int().min(0).max(0o7777).optional(),
});

export const Backend = z.enum(['container', 'microvm', 'vm']);

export const CreateSandboxRequest = z
  .strictObject({
    backend: Backend.optional(),
    /** The image to start from (one of `image` and `snapshot`). */
    image: name.optional(),
    /**
     * A snapshot to start from (POST /v1/sandboxes/{id}/snapshots), instead of an image: its files,
     * and its source's backend, user and workdir where this request names none.
     */
    snapshot: name.optional(),
    layers: z.array(name).max(120).optional(),
    resources: Resources.optional(),
    lifetime: Lifetime.optional(),
    network: NetworkPolicy.optional(),
    env: Env.optional(),
    user: UserName.optional(),
    workdir: absPath.optional(),
    files: z.array(FileSpec).max(1024).optional(),
    labels: Labels.optional(),
    requestId: z.string().min(1).max(256).optional(),
    /** A lease of the caller's (POST /v1/leases): the sandbox lives only while the lease is renewed. */
    lease: z.string().min(1).max(64).optional(),
    /** Wait up to `waitSeconds` for room (in a queue per tenant, served in turns) instead of failing at once while the cluster is full. */
    schedule: z.strictObject({ waitSeconds: z.number().int().min(0).max(3600) }).optional(),
  })
  .refine((r) => (r.image === undefined) !== (r.snapshot === undefined), { message: 'name an image or a snapshot (one of them)', path: ['image'] });
export type CreateSandboxRequest = z.infer<typeof CreateSandboxRequest>;

export const SandboxState = z.enum(['creating', 'running', 'paused', 'stopped', 'failed']);
export type SandboxState = z.infer<typeof SandboxState>;

/**
 * Why a sandbox ended. The agent's doing: `oom` (the kernel's OOM killer ended its init at the
 * sandbox's own memory limit). The operator's: `deleted`, `ttl`, `idle`, `lease` (its lease lapsed
 * or was deleted), `shutdown` (its node was stopped without keeping its sandboxes). The
 * platform's: `exited` (its init, PID 1, ended otherwise: nothing inside can kill it, so a crash or
 * a kill from the host), `node_lost` (its node stopped answering, or it was gone when its node came
 * back), `infra` (Warren could not make or keep it: `detail` says what failed). Its pids and disk
 * limits end no sandbox (a fork refused, a write refused: the sandbox lives on); the command that
 * ran into one says so (ExecResult `limitsHit`).
 */
export const SandboxEndReason = z.enum(['exited', 'oom', 'deleted', 'ttl', 'idle', 'lease', 'shutdown', 'node_lost', 'infra']);
export type SandboxEndReason = z.infer<typeof SandboxEndReason>;

/** Whose doing an end is: an RL reward should count only the agent's. */
export const END_BY: Record<SandboxEndReason, 'agent' | 'operator' | 'platform'> = {
  exited: 'platform',
  oom: 'agent',
  deleted: 'operator',
  ttl: 'operator',
  idle: 'operator',
  lease: 'operator',
  shutdown: 'operator',
  node_lost: 'platform',
  infra: 'platform',
};

export const SandboxEnd = z.object({
  reason: SandboxEndReason,
  by: z.enum(['agent', 'operator', 'platform']),
  /** What happened, for people (null: nothing more to say). */
  detail: z.string().nullable(),
  at: z.string(),
});
export type SandboxEnd = z.infer<typeof SandboxEnd>;

export const ApiErrorObject = z.object({
  code: z.string(),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});

/** A sandbox's (or a pool's) resources as the API answers them: every field filled in. */
export const ResourcesView = z.object({
  cpu: z.number(),
  memoryMiB: z.number(),
  /** What the node commits for it (admission counts requests; memoryMiB is the hard limit). */
  memoryRequestMiB: z.number(),
  pids: z.number(),
  diskMiB: z.number().nullable(),
  cpuClass: CpuClass,
});

export const Sandbox = z.object({
  id: z.string(),
  state: SandboxState,
  backend: Backend,
  image: z.string(),
  layers: z.array(z.string()),
  node: z.string(),
  labels: z.record(z.string(), z.string()),
  resources: ResourcesView,
  user: z.string().nullable(),
  workdir: z.string().nullable(),
  createdAt: z.string(),
  expiresAt: z.string().nullable(),
  lastActivityAt: z.string(),
  idleTimeoutSeconds: z.number().nullable(),
  pauseAfterIdleSeconds: z.number().nullable(),
  /** The lease it lives under (null: none). */
  lease: z.string().nullable(),
  usage: z.object({
    cpuSeconds: z.number(),
    /** CPUs used lately (cores, since the previous reading a second or more before). */
    cpuRecent: z.number(),
    memoryBytes: z.number(),
    /** Of the sandbox's memory, what sits in swap (a paused sandbox's, mostly). */
    swapBytes: z.number(),
    /** Seconds since the last call on the sandbox (or since its last command ended). */
    idleSeconds: z.number(),
  }),
  network: SandboxNetwork,
  error: ApiErrorObject.optional(),
  /** Why and when it ended (null while it lives). */
  end: SandboxEnd.nullable(),
});
export type Sandbox = z.infer<typeof Sandbox>;

export const ListSandboxesQuery = z.strictObject({
  label: z.array(z.string().regex(/^[^=]+=.*$/, 'label filters are key=value')).optional(),
  state: SandboxState.optional(),
  /** Only the sandboxes of this lease. */
  lease: z.string().min(1).max(64).optional(),
  /** Only the sandboxes created from this image (its name, as a create named it, or a snapshot's). */
  image: z.string().min(1).max(200).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  cursor: z.string().max(256).optional(),
});
export type ListSandboxesQuery = z.infer<typeof ListSandboxesQuery>;

export const ListSandboxesResponse = z.object({
  sandboxes: z.array(Sandbox),
  nextCursor: z.string().nullable(),
});
export type ListSandboxesResponse = z.infer<typeof ListSandboxesResponse>;

export const SetTimeoutRequest = z.strictObject({
  ttlSeconds: z
    .number()
    .int()
    .min(1)
    .max(30 * 86400),
});
export const StateResponse = z.object({ state: SandboxState });

export const BatchCreateRequest = z.strictObject({
  count: z.number().int().min(1).max(1000),
  template: CreateSandboxRequest,
});
export const BatchCreateResponse = z.object({
  sandboxes: z.array(Sandbox),
  errors: z.array(ApiErrorObject),
});

export const BatchByLabelsRequest = z.strictObject({ labels: Labels });
export const CountResponse = z.object({ count: z.number().int() });
