import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startWarren, type WarrenOptions } from '@warren/server';
import type { DefaultImageName } from '@warren/images';

export interface UpFlags {
  port: number;
  host: string;
  dataDir: string;
  imageCacheDir: string;
  keepSandboxes: boolean;
  images?: DefaultImageName[];
  adminKey?: string;
  runtime?: WarrenOptions['runtime'];
  blobStore?: WarrenOptions['blobStore'];
  network?: WarrenOptions['network'];
  swap?: WarrenOptions['swap'];
  overcommit?: WarrenOptions['overcommit'];
  memoryFloorMiB?: number;
  fn?: WarrenOptions['fn'];
  disk?: WarrenOptions['disk'];
  dataDiskReserveMiB?: number;
  pullRegistries?: string[];
}

const log = {
  info: (msg: string, meta?: unknown) => console.error(JSON.stringify({ level: 'info', msg, ...(meta && typeof meta === 'object' ? meta : {}) })),
  warn: (msg: string, meta?: unknown) => console.error(JSON.stringify({ level: 'warn', msg, ...(meta && typeof meta === 'object' ? meta : {}) })),
};

/** `warren up`: runs control plane + edge in the foreground until SIGINT/SIGTERM. */
export async function up(f: UpFlags): Promise<void> {
  const w = await startWarren({
    port: f.port,
    host: f.host,
    dataDir: f.dataDir,
    imageCacheDir: f.imageCacheDir,
    adminKey: f.adminKey,
    images: f.images,
    runtime: f.runtime,
    blobStore: f.blobStore,
    network: f.network,
    swap: f.swap,
    overcommit: f.overcommit,
    memoryFloorMiB: f.memoryFloorMiB,
    fn: f.fn,
    disk: f.disk,
    dataDiskReserveMiB: f.dataDiskReserveMiB,
    pullRegistries: f.pullRegistries,
    // No flag: the hardening benchmark's baseline node, and nothing else, sets this.
    unhardened: process.env.WARREN_UNHARDENED_BENCH === '1',
    // No flag either: fault-injection tests (test/src/faults.test.ts) crash the process at a step.
    crashAt: process.env.WARREN_TEST_CRASH_AT || undefined,
    // The suite's second pass (npm run test:http) runs every node on the edge's network transport.
    edgeTransport: process.env.WARREN_EDGE_TRANSPORT === 'http' ? 'http' : undefined,
    logger: log,
  });
  const pidFile = join(f.dataDir, 'warren.pid');
  await writeFile(pidFile, String(process.pid));
  console.log(`Warren is running at ${w.url}`);
  console.log(w.adminKeyFile ? `Admin API key: in ${w.adminKeyFile}` : 'Admin API key: from WARREN_API_KEY');
  console.log(`Try: WARREN_URL=${w.url} WARREN_API_KEY=$(cat ${w.adminKeyFile ?? '<key>'}) npx warren create busybox:latest`);
  let stopping = false;
  const stop = (sig: string): void => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { signal: sig, keepSandboxes: f.keepSandboxes });
    w.close({ keep: f.keepSandboxes })
      .then(() => rm(pidFile, { force: true }))
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
