import { mkdtemp, rm, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startWarren, type RunningWarren } from '@warren/server';
import { Warren } from '@warren/sdk';
import type { DefaultImageName } from '@warren/images';

export const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';

export interface TestWarren {
  warren: RunningWarren;
  client: Warren;
  dataDir: string;
  url: string;
  key: string;
  /** Stops Warren and removes its data dir; safe to call twice. */
  close(opts?: { keep?: boolean; removeData?: boolean }): Promise<void>;
}

const quiet = { info: () => undefined, warn: (m: string, meta?: unknown) => process.env.WARREN_TEST_LOG && console.error(m, meta) };

/** A real single-node Warren on a free loopback port with its own data dir. */
export async function startTestWarren(
  opts: { images?: DefaultImageName[]; dataDir?: string; adminKey?: string; defaultTtlSeconds?: number; maxSandboxes?: number } = {},
): Promise<TestWarren> {
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'warren-test-')));
  await chmod(dataDir, 0o711);
  const key = opts.adminKey ?? 'test-admin-key';
  const warren = await startWarren({
    port: 0,
    host: '127.0.0.1',
    dataDir,
    imageCacheDir: IMAGE_CACHE,
    adminKey: key,
    images: opts.images ?? ['busybox:latest'],
    defaultTtlSeconds: opts.defaultTtlSeconds,
    maxSandboxes: opts.maxSandboxes,
    logger: quiet,
  });
  const client = new Warren({ url: warren.url, apiKey: key });
  let closed = false;
  return {
    warren,
    client,
    dataDir,
    url: warren.url,
    key,
    async close(o = {}) {
      if (closed) return;
      closed = true;
      await warren.close({ keep: o.keep });
      if (o.removeData ?? !o.keep) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** Raw HTTP for tests of the wire itself. */
export async function http(
  t: TestWarren,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: unknown; text: string }> {
  const res = await fetch(t.url + path, {
    method,
    headers: { authorization: `Bearer ${t.key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, json, text };
}

export function errorCode(r: { json: unknown }): string | undefined {
  const j = r.json as { error?: { code?: string } } | null;
  return j?.error?.code;
}
