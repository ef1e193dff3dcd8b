import { WarrenError } from '@warren/api';

/** The subprotocol a browser's WebSocket names to carry its key (it cannot set Authorization). */
export const WS_PROTOCOL = 'warren';
/** The prefix of the subprotocol that carries the key, base64url-encoded after it. */
export const WS_BEARER_PREFIX = 'warren.bearer.';

/**
 * A WebSocket's credentials: its Authorization header, or else the key a browser offers as a
 * subprotocol `warren.bearer.<base64url(key)>` beside `warren` (as Kubernetes takes
 * `base64url.bearer.authorization.k8s.io.<token>`), since a browser cannot set headers on one.
 * `protocol` is the subprotocol to answer with (the client offered `warren`), or null. Pure.
 */
export function wsCredentials(headers: { authorization?: string; 'sec-websocket-protocol'?: string | string[] }): {
  authorization: string | undefined;
  protocol: string | null;
} {
  const raw = headers['sec-websocket-protocol'];
  const offered = (Array.isArray(raw) ? raw.join(',') : (raw ?? ''))
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  const protocol = offered.includes(WS_PROTOCOL) ? WS_PROTOCOL : null;
  const bearer = offered.filter((p) => p.startsWith(WS_BEARER_PREFIX));
  if (headers.authorization !== undefined || bearer.length === 0) return { authorization: headers.authorization, protocol };
  if (bearer.length > 1) throw new WarrenError('invalid_argument', 'a WebSocket offers one key at most');
  // The browser selects the one subprotocol the server answers: only `warren` may be it.
  if (!protocol) throw new WarrenError('invalid_argument', `a key offered as a subprotocol needs "${WS_PROTOCOL}" offered beside it`);
  const encoded = bearer[0]!.slice(WS_BEARER_PREFIX.length);
  if (!/^[A-Za-z0-9_-]{1,512}$/.test(encoded)) throw new WarrenError('unauthenticated', 'the key offered as a subprotocol is not base64url');
  return { authorization: `Bearer ${Buffer.from(encoded, 'base64url').toString('utf8')}`, protocol };
}
