import { WarrenError, z, type FnRunRequest, type FnRunResult } from '@warren/api';
import type { FnService } from '../../services/fn.js';
import type { Caller } from '../../services/sandboxes.js';

/**
 * SandboxFusion's `POST /run_code`, served by FnCall: the request as its clients send it (verl's
 * code tool and reward functions among them; fields Warren does not use are taken and ignored),
 * and the answer in its words.
 */
export const RunCodeRequest = z.looseObject({
  code: z.string().max(1024 * 1024),
  language: z.string().max(64),
  compile_timeout: z.number().min(0).optional(),
  run_timeout: z
    .number()
    .min(0)
    .max(15 * 60)
    .optional(),
  memory_limit_MB: z.number().optional(),
  stdin: z
    .string()
    .max(16 * 1024 * 1024)
    .nullable()
    .optional(),
  files: z.record(z.string().max(4096), z.string().nullable()).optional(),
  fetch_files: z.array(z.string()).max(256).optional(),
});
export type RunCodeRequest = z.infer<typeof RunCodeRequest>;

/** SandboxFusion's language names, by the FnCall language that runs each. */
const LANGUAGES: Record<string, FnRunRequest['language']> = {
  python: 'python',
  python3: 'python',
  bash: 'bash',
  sh: 'bash',
  nodejs: 'node',
  javascript: 'node',
  js: 'node',
};

export interface RunCodeResponse {
  status: 'Success' | 'Failed' | 'SandboxError';
  message: string;
  compile_result: null;
  run_result: { status: 'Finished' | 'TimeLimitExceeded' | 'Error'; execution_time: number; return_code: number | null; stdout: string; stderr: string } | null;
  executor_pod_name: null;
  files: Record<string, string>;
}

/** The FnCall request of a run_code request, or the SandboxError it answers instead (pure). */
export function fnRequestOf(r: RunCodeRequest): FnRunRequest | RunCodeResponse {
  const language = LANGUAGES[r.language];
  if (!language) return sandboxError(`language ${r.language} is not served here: ${Object.keys(LANGUAGES).join(', ')}`);
  if (r.fetch_files?.length) return sandboxError('fetch_files is not supported: each call leaves nothing behind; print what you need');
  const files = Object.entries(r.files ?? {})
    .filter((e): e is [string, string] => typeof e[1] === 'string')
    .map(([path, content]) => ({ path, content, encoding: 'base64' as const }));
  const memory = r.memory_limit_MB !== undefined && r.memory_limit_MB > 0 ? Math.max(16, Math.round(r.memory_limit_MB)) : undefined;
  return {
    language,
    code: r.code,
    stdin: r.stdin ?? undefined,
    timeoutMs: Math.max(1, Math.round((r.run_timeout ?? 10) * 1000)),
    files: files.length ? files : undefined,
    resources: memory ? { memoryMiB: memory } : undefined,
  };
}

/** SandboxFusion's answer for a finished FnCall (pure): Success only for a run that finished with 0. */
export function runCodeResponse(x: FnRunResult): RunCodeResponse {
  const status = x.timedOut ? 'TimeLimitExceeded' : x.exitCode === null ? 'Error' : 'Finished';
  return {
    status: status === 'Finished' && x.exitCode === 0 ? 'Success' : 'Failed',
    message: '',
    compile_result: null,
    run_result: { status, execution_time: x.durationMs / 1000, return_code: x.exitCode, stdout: x.stdout, stderr: x.stderr },
    executor_pod_name: null,
    files: {},
  };
}

export function sandboxError(message: string): RunCodeResponse {
  return { status: 'SandboxError', message, compile_result: null, run_result: null, executor_pod_name: null, files: {} };
}

/**
 * Runs a run_code request as one FnCall. What FnCall refuses outright (a full queue, a quota)
 * stays Warren's error with its status; a call that could not run answers SandboxError.
 */
export async function runCode(d: { fn: FnService }, caller: Caller, r: RunCodeRequest): Promise<RunCodeResponse> {
  const req = fnRequestOf(r);
  if ('status' in req) return req;
  try {
    return runCodeResponse(await d.fn.run(caller, req));
  } catch (e) {
    if (e instanceof WarrenError && (e.code === 'resource_exhausted' || e.code === 'unauthenticated' || e.code === 'permission_denied')) throw e;
    return sandboxError(e instanceof WarrenError ? e.message : 'the call could not run');
  }
}
