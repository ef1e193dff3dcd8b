import type { AuditLog } from '../services/audit.js';
import type { Caller } from '../services/sandboxes.js';

/** One call as the audit log keeps it: who made it, on what, and how it ended. */
export interface AuditedCall {
  method: string;
  path: string;
  /** Null when the call failed before it authenticated. */
  caller: Caller | null;
  sandbox?: string;
  status: number;
  /** The error's code; null for a call that succeeded. */
  code: string | null;
}

/** Writes a call's audit entry: the routes of the contract (`on` in app.ts) and those outside it (the terminal) alike. */
export function auditCall(audit: AuditLog, c: AuditedCall): void {
  audit.record({
    keyId: c.caller?.keyId ?? null,
    tenant: c.caller?.tenant ?? null,
    method: c.method,
    path: c.path,
    sandbox: c.sandbox ?? null,
    status: c.status,
    code: c.code,
  });
}
