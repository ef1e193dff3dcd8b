import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError } from '@warren/api';
import type { RouteDeps } from '../../http/route-types.js';
import { auditedError, recordCall, type AuditScope } from '../audit.js';
import { sendE2bError, serveE2bApi } from './api.js';
import { serveEnvd } from './envd.js';

/**
 * E2B's protocols, so that E2B's SDKs work against Warren unchanged: its control plane under
 * `/e2b` (E2B_API_URL) and every sandbox's agent under `/e2b/envd` (E2B_SANDBOX_URL; the sandbox
 * named by the E2b-Sandbox-Id header the SDKs send). docs/e2b.md says what maps to what.
 */
export const E2B_PREFIX = '/e2b/';
const ENVD_PREFIX = '/e2b/envd';

/** The E2B URLs of a Warren at `base` (GET /v1/info names them). */
export function e2bUrls(base: string): { apiUrl: string; sandboxUrl: string } {
  return { apiUrl: `${base}/e2b`, sandboxUrl: `${base}${ENVD_PREFIX}` };
}

/** Serves a request under `/e2b/`; every call that changes something leaves an audit entry. */
export async function serveE2b(d: RouteDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  if (url.pathname === ENVD_PREFIX || url.pathname.startsWith(`${ENVD_PREFIX}/`)) return serveEnvd(d, req, res, url.pathname.slice(ENVD_PREFIX.length), url);
  const method = req.method ?? 'GET';
  const scope: AuditScope = {};
  const record = (status: number, error: { code: string } | null): void => {
    if (method !== 'GET') recordCall(d.audit, { method, path: url.pathname, scope, status, error });
  };
  try {
    if (!(await serveE2bApi(d, req, res, url.pathname.slice('/e2b'.length), url, scope)))
      throw new WarrenError('not_found', `no E2B route ${method} ${url.pathname}`);
    record(res.statusCode, null);
  } catch (e) {
    const err = auditedError(e);
    record(err.status, err);
    if (res.headersSent) return void res.destroy();
    sendE2bError(res, e);
  }
}
