import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
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
 * How long an access token serves after the create, connect or info that gave it: E2B's longest
 * session (a sandbox runs at most 24 h there between resumes), so an SDK object that holds the
 * token from its create works for as long as E2B's would; `Sandbox.connect` gives a new one.
 */
export const ACCESS_TOKEN_TTL_MS = 24 * 3600 * 1000;

const IV = 12;
const TAG = 16;

/**
 * A sandbox's agent token (E2B's envdAccessToken): the API key that asked for it and when the
 * token ends, sealed (AES-256-GCM) under the deployment's secret with the sandbox id as its
 * associated data. Every replica opens it with nothing stored; each call acts as that key, so a
 * revoked key's tokens stop working with it, and a token serves one sandbox, for a bounded time.
 */
export function accessToken(secret: Buffer, sandboxId: string, apiKey: string, nowMs: number, ttlMs = ACCESS_TOKEN_TTL_MS): string {
  const iv = randomBytes(IV);
  const c = createCipheriv('aes-256-gcm', secret, iv);
  c.setAAD(Buffer.from(sandboxId, 'utf8'));
  const sealed = Buffer.concat([c.update(`${Math.floor((nowMs + ttlMs) / 1000)}\n${apiKey}`, 'utf8'), c.final()]);
  return Buffer.concat([iv, sealed, c.getAuthTag()]).toString('base64url');
}

/** The API key an access token carries, if it is this sandbox's, sealed under this secret, and not past its end. */
export function openAccessToken(secret: Buffer, sandboxId: string, token: string | undefined, nowMs: number): string {
  const wrong = (): WarrenError => new WarrenError('unauthenticated', 'a missing or wrong X-Access-Token for this sandbox');
  const raw = Buffer.from(token ?? '', 'base64url');
  if (!token || raw.length < IV + TAG + 3 || raw.toString('base64url') !== token) throw wrong();
  let plain: string;
  try {
    const d = createDecipheriv('aes-256-gcm', secret, raw.subarray(0, IV));
    d.setAAD(Buffer.from(sandboxId, 'utf8'));
    d.setAuthTag(raw.subarray(raw.length - TAG));
    plain = Buffer.concat([d.update(raw.subarray(IV, raw.length - TAG)), d.final()]).toString('utf8');
  } catch {
    throw wrong();
  }
  const nl = plain.indexOf('\n');
  const endS = Number(plain.slice(0, nl));
  if (nl < 1 || !Number.isSafeInteger(endS)) throw wrong();
  if (nowMs >= endS * 1000) throw new WarrenError('unauthenticated', 'this X-Access-Token has expired: Sandbox.connect gives a new one');
  return plain.slice(nl + 1);
}
