import { WarrenError } from '@warren/api';
import { auditCall } from '../http/audit-call.js';
import type { AuditLog } from '../services/audit.js';
import type { Caller } from '../services/sandboxes.js';

/** Who made a compatibility call and on which sandbox, filled in as the call learns them. */
export interface AuditScope {
  caller?: Caller;
  sandbox?: string;
}

/**
 * One entry of a compatibility call (E2B, SandboxFusion) in the audit log: the API's own record
 * (auditCall, as `on()` in http/app.ts writes it). `path` is what is recorded: never a URL that
 * carries a key.
 */
export function recordCall(audit: AuditLog, o: { method: string; path: string; scope: AuditScope; status: number; error?: { code: string } | null }): void {
  auditCall(audit, { method: o.method, path: o.path, caller: o.scope.caller ?? null, sandbox: o.scope.sandbox, status: o.status, code: o.error?.code ?? null });
}

/** The status and code an error is recorded with (anything not Warren's: internal). */
export function auditedError(e: unknown): { status: number; code: string } {
  const err = e instanceof WarrenError ? e : new WarrenError('internal', 'internal error');
  return { status: err.status, code: err.code };
}
