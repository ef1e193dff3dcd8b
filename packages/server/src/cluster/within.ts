import { WarrenError } from '@warren/api';

/**
 * `p`, unless `ms` pass first or `signal` fires (a node that went down): then `unavailable`
 * naming `what`. What `p` does goes on; the caller decides what to do about it.
 */
export async function within<T>(ms: number, what: string, p: Promise<T>, signal?: AbortSignal): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new WarrenError('unavailable', `${what} did not answer within ${ms} ms`)), ms);
    if (signal) {
      onAbort = () => reject(new WarrenError('unavailable', `${what} went down`));
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    }
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}
