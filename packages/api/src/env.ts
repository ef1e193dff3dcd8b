/**
 * `PATH` for every process Warren starts in a sandbox whose image sets none: Docker's default,
 * with no `.` or empty entry (so no command is looked up in the working directory).
 */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * The environment a sandbox's processes start from, as Docker gives a container's: the image's
 * own `Env`, `PATH` defaulted when the image sets none, then the create's `env` (later wins). The
 * init adds `HOME`, `USER` and `LOGNAME` from the image's passwd for each process's user when
 * none of these sets them, and a call's own `env` goes on top.
 */
export function sandboxEnv(imageEnv: Record<string, string> | undefined, createEnv: Record<string, string> | undefined): Record<string, string> {
  return { PATH: DEFAULT_PATH, ...imageEnv, ...createEnv };
}
