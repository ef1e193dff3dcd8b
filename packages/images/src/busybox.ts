import { chmod, copyFile, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BASE_USERS } from './rootfs.js';
import { runFile } from './exec-file.js';

/** Where Debian's busybox-static puts its binary. */
export const HOST_BUSYBOX = '/bin/busybox';
/** The platform's shell for commands and sessions (Debian's bash-static: runs in any image). */
export const HOST_BASH = '/bin/bash-static';

/** Builds a minimal busybox root filesystem in `dir` (ownership as on the host: root). */
export async function buildBusyboxRootfs(dir: string, busybox = HOST_BUSYBOX): Promise<void> {
  for (const d of ['bin', 'sbin', 'usr/bin', 'usr/sbin', 'etc', 'root', 'home/agent', 'proc', 'sys', 'dev', 'tmp', 'var/tmp', 'workspace']) {
    await mkdir(join(dir, d), { recursive: true });
  }
  await chmod(join(dir, 'tmp'), 0o1777);
  await chmod(join(dir, 'var/tmp'), 0o1777);
  await chmod(join(dir, 'root'), 0o700);
  await copyFile(busybox, join(dir, 'bin/busybox'));
  await chmod(join(dir, 'bin/busybox'), 0o755);
  const { stdout } = await runFile(busybox, ['--list-full']);
  for (const applet of stdout.split('\n').filter(Boolean)) {
    if (applet === 'bin/busybox') continue;
    // Absolute targets resolve inside the sandbox root.
    await symlink('/bin/busybox', join(dir, applet)).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
  }
  await writeFile(join(dir, 'etc/passwd'), BASE_USERS.passwd.join('\n') + '\n');
  await writeFile(join(dir, 'etc/group'), BASE_USERS.group.join('\n') + '\n');
  await writeFile(join(dir, 'etc/hostname'), 'sandbox\n');
  await writeFile(join(dir, 'etc/hosts'), '127.0.0.1 localhost sandbox\n::1 localhost\n');
}
