import { DEFAULTS } from './defaults.js';
import { z } from 'zod';
import { ExecRequest, ExecResult } from './exec.js';
import { AbsPath, Env, Resources } from './sandbox.js';

export const FnLanguage = z.enum(['python', 'bash', 'node']);

export const FnFile = z.strictObject({
  /** Absolute, or relative to `cwd`. */
  path: z.string().min(1).max(4096),
  content: z.string().max(16 * 1024 * 1024),
  encoding: z.enum(['utf8', 'base64']).optional(),
});

/**
 * One stateless call: `code` in `language` runs in a warm worker of `image`, in a root, process
 * tree and IPC namespace of its own; nothing of it is left for the next call.
 */
export const FnRunRequest = z.strictObject({
  language: FnLanguage,
  code: z
    .string()
    .max(1024 * 1024)
    .describe('python: as `python3 -c`; bash: as `bash -c`; node: as `node -e`'),
  stdin: ExecRequest.shape.stdin,
  timeoutMs: z
    .number()
    .int()
    .min(1)
    .max(15 * 60 * 1000)
    .optional()
    .meta({ default: DEFAULTS.fn.timeoutMs })
    .describe('default 10000; the call is killed past it and answers timedOut'),
  image: z.string().min(1).max(256).optional().meta({ default: DEFAULTS.fn.image }).describe("default: the server's FnCall image (debian-python:latest)"),
  files: z.array(FnFile).max(256).optional().describe('written before the code runs'),
  env: Env.optional().describe('added to PATH, HOME, LANG (and replaces them where named)'),
  cwd: AbsPath.optional().meta({ default: DEFAULTS.fn.cwd }).describe('default /tmp'),
  resources: z
    .strictObject({
      cpu: Resources.shape.cpu.meta({ default: DEFAULTS.fn.resources.cpu }),
      memoryMiB: Resources.shape.memoryMiB.meta({ default: DEFAULTS.fn.resources.memoryMiB }),
      pids: Resources.shape.pids.meta({ default: DEFAULTS.fn.resources.pids }),
    })
    .optional()
    .describe("the call's CPU, memory (its writable files count) and pids limits; default: the server's (1 CPU, 512 MiB, 256)"),
  maxOutputBytes: z
    .number()
    .int()
    .min(0)
    .max(64 * 1024 * 1024)
    .optional()
    .meta({ default: DEFAULTS.fn.maxOutputBytes })
    .describe('stdout + stderr kept, default 1 MiB; past it the call is killed and answers truncated'),
});
export type FnRunRequest = z.infer<typeof FnRunRequest>;

/**
 * What an exec answers (durationMs: from the start on its worker to its end), and queuedMs: time
 * spent waiting for a free worker. No limitsHit: a worker's limits are its pool's, not the call's.
 */
export const FnRunResult = ExecResult.omit({ commandId: true, limitsHit: true }).extend({ queuedMs: z.number() });
export type FnRunResult = z.infer<typeof FnRunResult>;

export const FnBatchRequest = z.strictObject({ calls: z.array(FnRunRequest).min(1).max(1000) });
export type FnBatchRequest = z.infer<typeof FnBatchRequest>;

const FnCallError = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

/** In the order of the calls; a call that could not run has `error` instead of a result. */
export const FnBatchResponse = z.object({ results: z.array(z.union([FnRunResult, FnCallError])) });
export type FnBatchResponse = z.infer<typeof FnBatchResponse>;
