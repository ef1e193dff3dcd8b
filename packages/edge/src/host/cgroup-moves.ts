import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';

/**
 * What makes moving a process into a cgroup cheap: the cgroup2 mount's `favordynmods` option.
 * Every move (a write to `cgroup.procs`, v1 or v2) takes the kernel's cgroup thread-group lock
 * for writing, which by default waits out an RCU grace period first: ~12 ms on this kind of
 * machine, each time, for each new sandbox's init. With the option the lock's readers (fork,
 * exit) take a slightly slower path always and a move waits for nothing (~0.03 ms). The flag is
 * the kernel's, for every hierarchy; it is set through the cgroup2 mount (a hybrid host's
 * `/sys/fs/cgroup/unified` too).
 */
export const FAVOR_OPTION = 'favordynmods';

/** A remount that turns the option on (pure): the cgroup2 mount and its options, theirs kept. */
export type FavorPlan = { state: 'on' } | { state: 'none' } | { state: 'remount'; target: string; options: string };

/**
 * From /proc/self/mountinfo: the first cgroup2 mount, whether it has `favordynmods`, and if not
 * the options to remount it with (its own super-block options, which a remount would otherwise
 * clear — nsdelegate, memory_recursiveprot —, and the option).
 */
export function favorPlan(mountinfo: string): FavorPlan {
  for (const line of mountinfo.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const [fstype, , superOpts = ''] = line.slice(sep + 3).split(' ');
    if (fstype !== 'cgroup2') continue;
    const target = unescapeMountPath(line.slice(0, sep).split(' ')[4] ?? '');
    const opts = superOpts.split(',').filter((o) => o && o !== 'rw' && o !== 'ro');
    if (opts.includes(FAVOR_OPTION)) return { state: 'on' };
    return { state: 'remount', target, options: [...opts, FAVOR_OPTION].join(',') };
  }
  return { state: 'none' };
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/**
 * Turns `favordynmods` on where it is off (a remount of the cgroup2 mount); it stays on after the
 * node stops, as a host tuning (other starts on the host gain from it too, and turning it off
 * under another node's creates would only slow them). Answers what happened, for the log: `on`
 * (it was), `turned-on`, `no-cgroup2`, or `not turned on: why`.
 */
export async function favorCgroupMoves(mountinfoPath = '/proc/self/mountinfo'): Promise<string> {
  const plan = favorPlan(await readFile(mountinfoPath, 'utf8'));
  if (plan.state === 'on') return 'on';
  if (plan.state === 'none') return 'no-cgroup2';
  try {
    await promisify(execFile)('mount', ['-t', 'cgroup2', '-o', `remount,${plan.options}`, 'cgroup2', plan.target], { timeout: 10_000 });
  } catch (e) {
    return `not turned on: ${String((e as { stderr?: string }).stderr || e).trim()}`;
  }
  // A kernel that does not know the option, or a cgroup namespace not the host's, ignores it.
  return favorPlan(await readFile(mountinfoPath, 'utf8')).state === 'on' ? 'turned-on' : 'not turned on: the kernel ignored it';
}
