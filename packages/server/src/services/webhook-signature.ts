import { createHmac, timingSafeEqual } from 'node:crypto';

/** How far a signature's time may be from the receiver's clock before it is refused as a replay (s). */
export const WEBHOOK_TOLERANCE_SECONDS = 300;

const hmac = (secret: string, tSeconds: number, body: string | Buffer): Buffer => createHmac('sha256', secret).update(`${tSeconds}.`).update(body).digest();

/**
 * The `Warren-Signature` header of a webhook's body sent at `tSeconds` (unix seconds):
 * `t=<tSeconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`. The time is signed with the body, so
 * a receiver can refuse an old delivery replayed.
 * @example
 * signWebhook(secret, body, Math.floor(Date.now() / 1000)); // 't=1796536800,v1=5f…'
 */
export function signWebhook(secret: string, body: string | Buffer, tSeconds: number): string {
  return `t=${tSeconds},v1=${hmac(secret, tSeconds, body).toString('hex')}`;
}

/**
 * Whether `header` signs `body` under `secret`, at a time within `toleranceSeconds` of
 * `nowSeconds`: the check a receiver makes (here for tests and for receivers written in
 * TypeScript). Compares in constant time; any `v1=` may match (a header may carry several while
 * a secret is rotated).
 */
export function verifyWebhook(
  secret: string,
  header: string,
  body: string | Buffer,
  nowSeconds: number,
  toleranceSeconds = WEBHOOK_TOLERANCE_SECONDS,
): boolean {
  const parts = header.split(',').map((p) => [p.slice(0, p.indexOf('=')).trim(), p.slice(p.indexOf('=') + 1).trim()] as const);
  const t = parts.find(([k]) => k === 't')?.[1];
  if (!t || !/^\d{1,12}$/.test(t)) return false;
  if (Math.abs(nowSeconds - Number(t)) > toleranceSeconds) return false;
  const want = hmac(secret, Number(t), body);
  return parts.some(([k, v]) => {
    if (k !== 'v1' || !/^[0-9a-f]{64}$/.test(v)) return false;
    return timingSafeEqual(Buffer.from(v, 'hex'), want);
  });
}
