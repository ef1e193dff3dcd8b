import { createHmac, timingSafeEqual } from 'node:crypto';
import { WarrenError } from '@warren/api';

/**
 * E2B's key shape, `e2b_<hex>`, for a Warren key: its bytes in hex (no table: any Warren key has
 * one, and it names the same tenant). `warren up` prints it as E2B_API_KEY.
 */
export function e2bKey(warrenKey: string): string {
  return `e2b_${Buffer.from(warrenKey, 'utf8').toString('hex')}`;
}

/** The Warren key an E2B-shaped key stands for; a Warren key is taken as it is. */
export function warrenKeyOf(key: string): string {
  const m = /^e2b_((?:[0-9a-f]{2})+)$/.exec(key);
  if (!m) return key;
  const k = Buffer.from(m[1]!, 'hex').toString('utf8');
  if (!/^[\x21-\x7e]+$/.test(k)) throw new WarrenError('unauthenticated', 'unknown API key');
  return k;
}

/**
 * A sandbox's agent token (E2B's envdAccessToken): a MAC of its id under the deployment's secret,
 * so every replica checks it with nothing stored, and it works again after a restart.
 */
export function accessToken(secret: Buffer, sandboxId: string): string {
  return createHmac('sha256', secret).update(sandboxId).digest('base64url');
}

export function checkAccessToken(secret: Buffer, sandboxId: string, token: string | undefined): void {
  const want = Buffer.from(accessToken(secret, sandboxId));
  const got = Buffer.from(token ?? '');
  if (got.length !== want.length || !timingSafeEqual(got, want)) throw new WarrenError('unauthenticated', 'a missing or wrong X-Access-Token for this sandbox');
}
