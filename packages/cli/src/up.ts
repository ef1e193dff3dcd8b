import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { e2bUrls, startWarren } from '@warren/server';
import type { UpOptions } from './node-options.js';

export const log = {
  info: (msg: string, meta?: unknown) => console.error(JSON.stringify({ level: 'info', msg, ...(meta && typeof meta === 'object' ? meta : {}) })),
  warn: (msg: string, meta?: unknown) => console.error(JSON.stringify({ level: 'warn', msg, ...(meta && typeof meta === 'object' ? meta : {}) })),
};

/** `warren up`: runs control plane + edge in the foreground until SIGINT/SIGTERM. */
export async function up(f: UpOptions): Promise<void> {
  const { keepSandboxes: _keep, ...options } = f;
  const w = await startWarren({ ...options, logger: log });
  const pidFile = join(f.dataDir, 'warren.pid');
  await writeFile(pidFile, String(process.pid));
  console.log(`Warren is running at ${w.url}`);
  console.log(w.adminKeyFile ? `Admin API key: in ${w.adminKeyFile}` : 'Admin API key: from WARREN_API_KEY');
  console.log(`Try: WARREN_URL=${w.url} WARREN_API_KEY=$(cat ${w.adminKeyFile ?? '<key>'}) npx warren create busybox:latest`);
  // E2B's SDKs, unchanged: its URLs, and the key in E2B's shape (e2b_ and the key's bytes in hex).
  const urls = e2bUrls(w.url);
  const hex = w.adminKeyFile ? `$(tr -d '\\n' < ${w.adminKeyFile} | od -An -tx1 -v | tr -d ' \\n')` : '<the key in hex>';
  console.log('E2B SDKs:');
  console.log(`export E2B_API_URL=${urls.apiUrl}`);
  console.log(`export E2B_SANDBOX_URL=${urls.sandboxUrl}`);
  console.log(`export E2B_API_KEY=e2b_${hex}`);
  runUntilSignal(() => w.close({ keep: f.keepSandboxes }), f.dataDir, false);
}

/**
 * Runs until SIGINT or SIGTERM, then `close` and exit. With a data dir, its pid file
 * (`warren.pid`, what `warren down` signals) is written now (unless the caller did) and removed
 * at the end.
 */
export function runUntilSignal(close: (signal: string) => Promise<void>, dataDir?: string, writePid = true): void {
  const pidFile = dataDir ? join(dataDir, 'warren.pid') : null;
  if (pidFile && writePid) void writeFile(pidFile, String(process.pid)).catch(() => undefined);
  let stopping = false;
  const stop = (sig: string): void => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { signal: sig });
    close(sig)
      .then(() => (pidFile ? rm(pidFile, { force: true }) : undefined))
      .then(
        () => process.exit(0),
        (e: unknown) => {
          log.warn('stop failed', { error: String(e) });
          process.exit(1);
        },
      );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

/** `warren down`: asks a running `warren up` (found by its pid file) to stop, and waits. */
export async function down(dataDir: string, timeoutMs = 60_000): Promise<boolean> {
  const pidText = await readFile(join(dataDir, 'warren.pid'), 'utf8').catch(() => '');
  const pid = Number(pidText.trim());
  if (!pid) return false;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return false;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`warren (pid ${pid}) did not stop within ${timeoutMs} ms`);
}
