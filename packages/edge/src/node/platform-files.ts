import { chmod, copyFile, mkdir, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HOST_BASH, HOST_BUSYBOX } from '@warren/images';

/** Where the native helpers (warren-init, warren-hostd, …) are built in this checkout (`make -C native`). */
export const defaultNativeDir = (): string => fileURLToPath(new URL('../../../../native/build/', import.meta.url));

/**
 * Puts a helper into the platform dir. Running sandboxes execute the old file, so it is never
 * written in place (ETXTBSY): an unchanged file is left alone, a changed one renamed over.
 */
async function installPlatformFile(src: string, dest: string): Promise<void> {
  const [a, b] = await Promise.all([readFile(src), readFile(dest).catch(() => null)]);
  if (b && a.equals(b)) return;
  const tmp = `${dest}.${process.pid}.tmp`;
  await copyFile(src, tmp);
  await chmod(tmp, 0o755);
  await rename(tmp, dest);
}

/**
 * Makes the data dir and its platform dir (what every sandbox mounts read-only: the init,
 * busybox, bash, the FnCall library and zygote) and returns the platform dir.
 */
export async function installPlatform(dataDir: string, nativeDir: string): Promise<string> {
  await mkdir(dataDir, { recursive: true });
  // Sandbox roots and the platform mount live below the data dir: root inside a sandbox (an
  // unprivileged host uid) must be able to traverse it, but not list it.
  await chmod(dataDir, 0o711);
  const platformDir = join(dataDir, 'platform');
  await mkdir(platformDir, { recursive: true, mode: 0o755 });
  await installPlatformFile(join(nativeDir, 'warren-init'), join(platformDir, 'warren-init'));
  await installPlatformFile(HOST_BUSYBOX, join(platformDir, 'busybox'));
  await installPlatformFile(HOST_BASH, join(platformDir, 'bash'));
  await installPlatformFile(join(nativeDir, 'libwarren-fn.so'), join(platformDir, 'libwarren-fn.so'));
  await installPlatformFile(join(nativeDir, 'fn-zygote.py'), join(platformDir, 'fn-zygote.py'));
  return platformDir;
}
