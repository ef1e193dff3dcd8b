import { WarrenError } from '@warren/api';

/** The parts of an OCI image config (or `docker save` config) Warren reads. */
export interface ImageConfigDoc {
  rootfs?: { diff_ids?: string[] };
  config?: { Env?: unknown } | null;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
const MAX_ENV_ENTRIES = 1024;
const MAX_ENV_BYTES = 256 * 1024;

/**
 * An image config's `Env` (`["K=V", …]`) as a map, later entries winning as in Docker. Entries
 * that are not `NAME=value` with a shell-safe name are refused, and so is an environment past
 * 1,024 entries or 256 KiB: it is copied into every process of every sandbox of the image.
 */
export function configEnv(doc: ImageConfigDoc): Record<string, string> {
  const list = doc.config?.Env;
  if (list === undefined || list === null) return {};
  if (!Array.isArray(list)) throw new WarrenError('invalid_argument', 'the image config has an Env that is not a list');
  if (list.length > MAX_ENV_ENTRIES) throw new WarrenError('invalid_argument', `the image config's Env has more than ${MAX_ENV_ENTRIES} entries`);
  const out: Record<string, string> = {};
  let bytes = 0;
  for (const e of list) {
    const i = typeof e === 'string' ? e.indexOf('=') : -1;
    const k = typeof e === 'string' ? e.slice(0, i) : '';
    if (i < 1 || !ENV_NAME.test(k))
      throw new WarrenError('invalid_argument', `the image config's Env has an entry that is not NAME=value: ${JSON.stringify(e).slice(0, 80)}`);
    bytes += (e as string).length;
    out[k] = (e as string).slice(i + 1);
  }
  if (bytes > MAX_ENV_BYTES) throw new WarrenError('invalid_argument', `the image config's Env is larger than ${MAX_ENV_BYTES} bytes`);
  return out;
}
