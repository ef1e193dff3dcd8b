import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError } from '@warren/api';
import type { RouteDeps } from '../../http/route-types.js';
import { sendE2bError, serveE2bApi } from './api.js';
import { serveEnvd } from './envd.js';

/**
 * E2B's protocols, so that E2B's SDKs work against Warren unchanged: its control plane under
 * `/e2b` (E2B_API_URL) and every sandbox's agent under `/e2b/envd` (E2B_SANDBOX_URL; the sandbox
 * named by the E2b-Sandbox-Id header the SDKs send). docs/e2b.md says what maps to what.
 */
export const E2B_PREFIX = '/e2b/';
const ENVD_PREFIX = '/e2b/envd';

export function e2bUrls(base: string): { apiUrl: string; sandboxUrl: string } {
  return { apiUrl: `${base}/e2b`, sandboxUrl: `${base}${ENVD_PREFIX}` };
}

export async function serveE2b(d: RouteDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  if (url.pathname === ENVD_PREFIX || url.pathname.startsWith(`${ENVD_PREFIX}/`)) return serveEnvd(d, req, res, url.pathname.slice(ENVD_PREFIX.length), url);
  try {
    if (!(await serveE2bApi(d, req, res, url.pathname.slice('/e2b'.length), url)))
      throw new WarrenError('not_found', `no E2B route ${req.method ?? ''} ${url.pathname}`);
  } catch (e) {
    if (res.headersSent) return void res.destroy();
    sendE2bError(res, e);
  }
}
