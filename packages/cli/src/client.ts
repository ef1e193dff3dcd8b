import { readFile } from 'node:fs/promises';
import { connect, WarrenError, type Sandbox } from '@warren/sdk';

export const DEFAULT_DATA_DIR = process.env.WARREN_DATA_DIR ?? '/var/lib/warren';
export const DEFAULT_IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';

/** The client of a command: WARREN_URL and WARREN_API_KEY, else the local node's admin key. */
export async function client(): Promise<ReturnType<typeof connect>> {
  let apiKey = process.env.WARREN_API_KEY;
  if (!apiKey) apiKey = (await readFile(`${DEFAULT_DATA_DIR}/admin.key`, 'utf8').catch(() => '')).trim() || undefined;
  return connect({ apiKey });
}

export async function sandbox(id: string | undefined): Promise<Sandbox> {
  if (!id) throw new WarrenError('invalid_argument', 'name a sandbox id');
  return (await client()).sandboxes.get(id);
}
