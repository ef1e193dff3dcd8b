import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { WarrenError, type KeyRole } from '@warren/api';
import type { KeyRecord, Store } from '../store/store.js';
import type { Caller } from './sandboxes.js';

export const hashKey = (key: string): string => createHash('sha256').update(key).digest('hex');
/** What names a key in the audit log: part of its hash, never the key. */
const keyId = (hash: string): string => `k_${hash.slice(0, 16)}`;

/**
 * API keys: stored hashed, looked up in the store at most once a second per presented key and
 * process (no hash and no database on the hot path); the bootstrap admin key is compared in
 * constant time. A key revoked through one replica stops working there at once and on the
 * others within `cacheMs`, when they next look it up.
 */
export class Auth {
  /** Callers by presented key; `until`: when a store key is looked up again (the admin's and join token's never are). */
  private readonly cache = new Map<string, { caller: Caller; until: number }>();
  private readonly lookups = new Map<string, Promise<Caller>>();
  private readonly adminHash: Buffer;
  private readonly joinHash: Buffer | null;

  constructor(
    private readonly store: Store,
    adminKey: string,
    /** The token edges join the cluster with (none: no edge may join). */
    joinToken?: string,
    private readonly o: { now?: () => number; cacheMs?: number } = {},
  ) {
    this.adminHash = Buffer.from(hashKey(adminKey), 'hex');
    this.joinHash = joinToken ? Buffer.from(hashKey(joinToken), 'hex') : null;
  }

  /**
   * A secret of this deployment for `purpose`, the same in every replica and across restarts
   * (derived from the bootstrap admin key, which they share), never the key itself.
   */
  secret(purpose: string): Buffer {
    return createHmac('sha256', this.adminHash).update(purpose).digest();
  }

  /**
   * The caller a request's `Authorization` header names. The join token is an edge's, not a
   * tenant's: it is refused (permission_denied) on every surface (the API, E2B, run_code, the
   * terminal, ports) but the few an edge calls, which say so with `o.node`. One check here, so no
   * surface that authenticates can forget it.
   */
  async authenticate(header: string | undefined, o: { node?: boolean } = {}): Promise<Caller> {
    const caller = await this.identify(header);
    if (caller.node && !o.node) throw new WarrenError('permission_denied', 'the join token serves edges only (join, heartbeats, blobs)');
    return caller;
  }

  private async identify(header: string | undefined): Promise<Caller> {
    const m = /^Bearer\s+(\S+)$/i.exec(header ?? '');
    if (!m?.[1]) throw new WarrenError('unauthenticated', 'missing "Authorization: Bearer <key>"');
    const now = (this.o.now ?? Date.now)();
    const cached = this.cache.get(m[1]);
    if (cached && now < cached.until) return cached.caller;
    // Calls with one key at once share its lookup.
    const pending = this.lookups.get(m[1]);
    if (pending) return pending;
    const lookup = this.lookup(m[1], now).finally(() => this.lookups.delete(m[1]!));
    this.lookups.set(m[1], lookup);
    return lookup;
  }

  private async lookup(key: string, now: number): Promise<Caller> {
    const hash = hashKey(key);
    let caller: Caller | undefined;
    let until = Infinity;
    const presented = Buffer.from(hash, 'hex');
    if (timingSafeEqual(presented, this.adminHash)) caller = { tenant: 'default', role: 'admin', quota: {}, keyId: 'admin' };
    else if (this.joinHash && timingSafeEqual(presented, this.joinHash)) caller = { tenant: '-', role: 'runner', quota: {}, keyId: 'node', node: true };
    else {
      const k = await this.store.getKey(hash);
      if (k) caller = { tenant: k.tenant, role: k.role, quota: k.quota, keyId: keyId(hash) };
      until = now + (this.o.cacheMs ?? 1000);
    }
    if (!caller) {
      this.cache.delete(key);
      throw new WarrenError('unauthenticated', 'unknown API key');
    }
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(key, { caller, until });
    return caller;
  }

  /**
   * Revokes a key by its keyId: it is removed from the store and from the cache of presented
   * keys, so its next call is unauthenticated. The bootstrap admin key cannot be revoked here.
   */
  async revoke(id: string): Promise<void> {
    const m = /^k_([0-9a-f]{16})$/.exec(id);
    if (!m?.[1])
      throw new WarrenError(
        id === 'admin' ? 'invalid_argument' : 'not_found',
        id === 'admin' ? 'the bootstrap admin key is set at start-up, not revoked' : `no key ${id}`,
        { keyId: id },
      );
    await this.store.deleteKeyByPrefix(m[1]);
    for (const [k, c] of this.cache) if (c.caller.keyId === id) this.cache.delete(k);
  }

  /** Makes a new key for a tenant; the key itself is returned once and never stored. */
  async createKey(tenant: string, role: KeyRole, quota: KeyRecord['quota']): Promise<{ key: string; keyId: string }> {
    const key = `wk_${randomBytes(24).toString('base64url')}`;
    const hash = hashKey(key);
    await this.store.putKey({ hash, tenant, role, quota, createdAt: Date.now() });
    return { key, keyId: keyId(hash) };
  }
}
