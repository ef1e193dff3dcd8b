import { DEFAULTS } from './defaults.js';
import { z } from 'zod';
import { AbsPath, Env, UserName } from './sandbox.js';
import { QueryFlag } from './files.js';

/** A terminal's size in character cells. */
export const TerminalSize = z.strictObject({
  cols: z.number().int().min(1).max(10_000),
  rows: z.number().int().min(1).max(10_000),
});
export type TerminalSize = z.infer<typeof TerminalSize>;

/**
 * Commands that may wait their turn in one shell session behind the one it runs; one more is
 * refused with resource_exhausted.
 */
export const MAX_QUEUED_SESSION_COMMANDS = 32;

export const ExecRequest = z.strictObject({
  cmd: z.union([
    z
      .string()
      .min(1)
      .max(1024 * 1024),
    z
      .array(z.string().max(128 * 1024))
      .min(1)
      .max(4096),
  ]),
  cwd: AbsPath.optional(),
  env: Env.optional(),
  user: UserName.optional(),
  stdin: z
    .string()
    .max(16 * 1024 * 1024)
    .optional(),
  timeoutMs: z
    .number()
    .int()
    .min(1)
    .max(24 * 3600 * 1000)
    .optional()
    .meta({ default: DEFAULTS.exec.timeoutMs })
    .describe("the command's time to run (default 60 s), from its start: a command in a session does not spend it waiting its turn"),
  session: z
    .string()
    .max(64)
    .optional()
    .describe(
      `a shell session (POST .../sessions) to run it in: its commands run one at a time, in the order they arrive; up to ${MAX_QUEUED_SESSION_COMMANDS} wait their turn behind the one it runs (one more: resource_exhausted). A waiting command has its start event (and commandId) at once; ending the session ends the waiting ones with not_found, killing one drops it`,
    ),
  maxOutputBytes: z
    .number()
    .int()
    .min(0)
    .max(256 * 1024 * 1024)
    .optional()
    .meta({ default: DEFAULTS.exec.maxOutputBytes }),
  keepOutput: z
    .enum(['first', 'last'])
    .optional()
    .describe(
      "which output maxOutputBytes keeps. 'first' (the default, but on a terminal): output past it is dropped, streamed to nobody, and the exit says truncated. 'last' (the default on a terminal): output streams on as it comes, and what is retained (the buffered answer, a stream read again from an offset) is its last maxOutputBytes; a reader behind that goes on from the oldest output retained, and the exit says truncated",
    ),
  requestId: z.string().min(1).max(256).optional(),
  keepStdinOpen: z.boolean().optional().describe('keep stdin open for POST .../stdin after `stdin` is sent'),
  pty: TerminalSize.optional().describe(
    'run it on a new pseudo-terminal of this size: stdin, stdout and stderr are the terminal (its output arrives as stdout; stdin stays open)',
  ),
  tag: z.string().max(256).optional().describe('a name the command is listed by (GET .../commands)'),
});
export type ExecRequest = z.infer<typeof ExecRequest>;

/**
 * Who ended a command that did not exit on its own: `timeout` (its timeoutMs), `request` (a kill
 * sent through the API), `oom` (the kernel, at the sandboxes' own memory limit: it exited by
 * SIGKILL, or a shell reported its child's, 137); null: it exited (or signalled itself).
 */
export const KilledBy = z.enum(['timeout', 'request', 'oom']).nullable();
export type KilledBy = z.infer<typeof KilledBy>;

/**
 * A limit of the sandbox's own (its `resources`) that a command ran into: `memory` (the kernel's
 * OOM killer ended a process of the sandbox at memoryMiB), `pids` (a fork was refused at the
 * sandbox's pids), `disk` (its writable layer was full, within 1 MiB of diskMiB, when the command
 * ended: a write got EDQUOT). Told of a command that did not exit 0 (a success says none and reads
 * nothing), on container sandboxes: memory and pids when the sandbox's counters rose since the
 * last such check (so a rise during a command that succeeded is told with the next that fails,
 * and commands at once share it). The sandbox lives on: no limit but memory can end a sandbox
 * (SandboxEndReason `oom`, when its init is killed).
 */
export const LimitHit = z.enum(['memory', 'pids', 'disk']);
export type LimitHit = z.infer<typeof LimitHit>;

const limitsHit = z
  .array(LimitHit)
  .describe("the sandbox's own limits the command ran into (see LimitHit; [] for a command that exited 0): tells a failure the agent's resources caused");

export const ExecEvent = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('start'),
    commandId: z.string(),
    pid: z.number().int().optional().describe("its process id inside the sandbox (a session's command: the session shell's)"),
  }),
  z.object({ type: z.literal('stdout'), data: z.string() }),
  z.object({ type: z.literal('stderr'), data: z.string() }),
  z.object({
    type: z.literal('exit'),
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
    durationMs: z.number(),
    timedOut: z.boolean(),
    truncated: z.boolean(),
    killedBy: KilledBy,
    limitsHit,
  }),
  z.object({ type: z.literal('error'), error: z.object({ code: z.string(), message: z.string() }) }),
]);
export type ExecEvent = z.infer<typeof ExecEvent>;
export type ExitEvent = Extract<ExecEvent, { type: 'exit' }>;

export const ExecResult = z.object({
  commandId: z.string(),
  stdout: z.string(),
  stderr: z.string(),
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  durationMs: z.number(),
  timedOut: z.boolean(),
  truncated: z.boolean(),
  killedBy: KilledBy,
  limitsHit,
});
export type ExecResult = z.infer<typeof ExecResult>;

export const KillRequest = z.strictObject({
  signal: z.enum(['SIGTERM', 'SIGKILL', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2']).optional(),
});
export type KillRequest = z.infer<typeof KillRequest>;

/** `eof=1` closes the command's stdin after these bytes. */
export const CommandStdinQuery = z.strictObject({ eof: QueryFlag.optional() });

export const CommandOutputQuery = z.strictObject({ offset: z.coerce.number().int().min(0).optional() });

export const CreateSessionRequest = z.strictObject({
  cwd: AbsPath.optional(),
  env: Env.optional(),
  user: UserName.optional(),
});
export const CreateSessionResponse = z.object({ sessionId: z.string() });

/** A command the sandbox runs now, or one it ran (`finished=1`), as `GET .../commands` lists it. */
export const CommandInfo = z.object({
  commandId: z.string(),
  pid: z.number().int(),
  cmd: z.union([z.string(), z.array(z.string())]),
  cwd: z.string().nullable(),
  env: z.record(z.string(), z.string()),
  tag: z.string().nullable(),
  pty: z.boolean(),
  startedAt: z.string(),
  /** When it ended (null: it runs). */
  finishedAt: z.string().nullable(),
  /** How it ended: its exit code, or the signal that ended it (both null while it runs, or when it could not be told). */
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
});
export type CommandInfo = z.infer<typeof CommandInfo>;
export const CommandList = z.object({ commands: z.array(CommandInfo) });

/** The most finished commands `GET .../commands?finished=1` lists (the newest ones the node keeps). */
export const MAX_FINISHED_COMMANDS_LISTED = 100;

export const ListCommandsQuery = z.strictObject({
  /** Also the finished commands the node keeps (the newest MAX_FINISHED_COMMANDS_LISTED), each with how it ended. */
  finished: QueryFlag.optional(),
});
export type ListCommandsQuery = z.infer<typeof ListCommandsQuery>;

/** A terminal's size as `GET /v1/sandboxes/{id}/pty` takes it (default 80×24). */
export const PtyQuery = z.strictObject({
  cols: z.coerce.number().int().min(1).max(10_000).optional(),
  rows: z.coerce.number().int().min(1).max(10_000).optional(),
});
