import { WarrenError, type SandboxEnd } from '@warren/api';

/**
 * A command cut off because its sandbox ended: not its own exit, nor its timeout (which answer
 * with `timedOut` / `killedBy`). `end` says why and whose doing it was (`end.by`: the agent's, the
 * operator's or the platform's), so an RL reward need not count the platform's failures.
 */
export class SandboxEndedError extends WarrenError {
  constructor(
    readonly end: SandboxEnd,
    cause?: unknown,
  ) {
    super('unavailable', `the sandbox ended: ${end.reason}${end.detail ? ` (${end.detail})` : ''}`, { end }, { cause });
    this.name = 'SandboxEndedError';
  }
}

/** How long a command cut off waits for its sandbox's end to be recorded (its node tells within a couple of seconds). */
const END_WAIT_MS = 4000;

/**
 * `e`, or the SandboxEndedError it stands for: a command that failed as `unavailable` on a sandbox
 * that has ended (or ends within END_WAIT_MS, as its node reports it) was cut off by that end.
 */
export async function endedOr(e: unknown, read: () => Promise<{ end: SandboxEnd | null }>): Promise<unknown> {
  if (!(e instanceof WarrenError) || e.code !== 'unavailable' || e instanceof SandboxEndedError) return e;
  const until = Date.now() + END_WAIT_MS;
  for (;;) {
    const s = await read().catch(() => null);
    if (s?.end) return new SandboxEndedError(s.end, e);
    // Not there, or still running when the time is out (another cause: a node unreachable for a moment): the error as it was.
    if (!s || Date.now() > until) return e;
    await new Promise((r) => setTimeout(r, 100));
  }
}
