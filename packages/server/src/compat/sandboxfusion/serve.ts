import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError } from '@warren/api';
import { jsonBody, sendError, sendJson } from '../../http/io.js';
import type { RouteDeps } from '../../http/route-types.js';
import { auditedError, recordCall, type AuditScope } from '../audit.js';
import { RunCodeRequest, runCode } from './run-code.js';

const KEYED = /^\/sandboxfusion\/([^/]+)\/run_code$/;
/** What a keyed run_code's path is logged and audited as: never the key it carries. */
const KEYED_PATH = '/sandboxfusion/{key}/run_code';

/** Whether a path is SandboxFusion's run_code (`/run_code`, or `/sandboxfusion/{key}/run_code`). */
export const isRunCodePath = (path: string): boolean => path === '/run_code' || KEYED.test(path);

/**
 * SandboxFusion's `POST /run_code`: the key as a bearer token, or in the path for clients that
 * send none. Answers every error itself, so that nothing logs the URL (the key in it); each call
 * leaves an audit entry, as Warren's own routes do.
 */
export async function serveRunCode(d: RouteDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const inPath = KEYED.exec(url.pathname)?.[1];
  const path = inPath === undefined ? url.pathname : KEYED_PATH;
  const scope: AuditScope = {};
  try {
    if (req.method !== 'POST') throw new WarrenError('invalid_argument', 'run_code takes a POST');
    let header = req.headers.authorization;
    if (inPath !== undefined) {
      let key: string;
      try {
        key = decodeURIComponent(inPath);
      } catch {
        throw new WarrenError('unauthenticated', 'unknown API key');
      }
      header = `Bearer ${key}`;
    }
    const caller = await d.auth.authenticate(header);
    scope.caller = caller;
    const body = await jsonBody(req, RunCodeRequest, 64 * 1024 * 1024).catch((e: unknown) => {
      // Node's own error for a body cut off mid-way: no key, no URL, a clear answer.
      throw e instanceof WarrenError ? e : new WarrenError('invalid_argument', 'the request body was cut off');
    });
    sendJson(res, 200, await runCode(d, caller, body));
    recordCall(d.audit, { method: 'POST', path, scope, status: 200 });
  } catch (e) {
    const err = auditedError(e);
    recordCall(d.audit, { method: req.method ?? 'POST', path, scope, status: err.status, error: err });
    if (!(e instanceof WarrenError)) d.logger.warn('run_code failed', { path, error: e instanceof Error ? e.name : typeof e });
    sendError(res, e);
    req.resume();
  }
}
