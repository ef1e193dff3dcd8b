import { CreateSandboxRequest, ExecRequest, TerminalSize, UserName, WarrenError, z } from '@warren/api';

/**
 * E2B's requests made into Warren's and checked by the API's own schemas, so that what the API
 * refuses E2B's calls cannot do either (label keys, environment names, users, terminal sizes,
 * tags); an error names the field in E2B's words.
 */

/** A schema's verdict, or invalid_argument naming the first bad field by `names` (Warren's path → E2B's). */
function parsed<T extends z.ZodType>(schema: T, value: unknown, names: Record<string, string>, where: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const path = (issue?.path ?? []).map(String);
  const head = path.length ? (names[path[0]!] ?? path[0]!) : '';
  const field = [head, ...path.slice(1)].filter(Boolean).join('.');
  // A record's bad key: what is wrong with it is in the key's own issue.
  const inner = issue && 'issues' in issue ? (issue.issues as Array<{ message?: string }> | undefined)?.[0]?.message : undefined;
  throw new WarrenError('invalid_argument', `${where}: ${field ? `${field}: ` : ''}${inner ?? issue?.message ?? 'invalid'}`, { field });
}

const CREATE_NAMES = { image: 'templateID', labels: 'metadata', env: 'envVars', lifetime: 'timeout' };

/** A create of E2B's (template, timeout, metadata, envs) as Warren's create request. */
export function createRequest(r: CreateSandboxRequest): CreateSandboxRequest {
  return parsed(CreateSandboxRequest, r, CREATE_NAMES, 'sandbox');
}

const EXEC_NAMES = { cmd: 'process.cmd', env: 'process.envs', cwd: 'process.cwd', user: 'user (Basic authorization)', pty: 'pty.size', tag: 'tag' };

/** A process start of E2B's as Warren's exec request. */
export function execRequest(r: ExecRequest): ExecRequest {
  return parsed(ExecRequest, r, EXEC_NAMES, 'process');
}

/** A terminal size E2B sends (Start, Update). */
export function terminalSize(v: unknown): TerminalSize {
  return parsed(TerminalSize, v, {}, 'pty.size');
}

/** A user E2B names (Basic authorization, `username`). */
export function userName(v: string): string {
  return parsed(UserName, v, {}, 'user');
}

/** A sandbox's time to live as E2B's requests give it (`timeout`, seconds). */
export const E2bTtlSeconds = z
  .number()
  .int()
  .min(1)
  .max(30 * 86400);
