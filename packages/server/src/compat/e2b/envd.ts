import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError } from '@warren/api';
import { sendJson } from '../../http/io.js';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';
import { auditedError, recordCall, type AuditScope } from '../audit.js';
import { userOf, type Agent, type Call } from './agent.js';
import { TOKEN_PURPOSE } from './api.js';
import { ConnectError, ConnectStream, connectError, connectStatus, isStreamRequest, readMessage, sendUnary, sendUnaryError } from './connect.js';
import { FILESYSTEM, serveFiles } from './envd-files.js';
import { PROCESS } from './envd-process.js';
import { WATCH } from './envd-watch.js';
import { openAccessToken } from './tokens.js';

const SERVICES: Record<string, Record<string, Call>> = { 'process.Process': PROCESS, 'filesystem.Filesystem': { ...FILESYSTEM, ...WATCH } };

/** The calls that change something in the sandbox: each leaves an audit entry, as Warren's own routes do. */
const MUTATING = new Set(['Start', 'SendInput', 'SendSignal', 'CloseStdin', 'Update', 'StreamInput', 'MakeDir', 'Remove', 'Move']);

/** The sandbox a request is for: its `E2b-Sandbox-Id` header, else its Host (`49983-{id}.{domain}`). */
function sandboxOf(req: IncomingMessage): string {
  const h = req.headers['e2b-sandbox-id'];
  if (typeof h === 'string' && h) return h;
  const host = /^\d+-([^.]+)\./.exec(String(req.headers.host ?? ''));
  if (host) return host[1]!;
  throw new WarrenError('invalid_argument', 'name the sandbox: an E2b-Sandbox-Id header, or a host 49983-{id}.{domain}');
}

/**
 * The key an access token was given to, as a caller: the token must be this sandbox's and in
 * date, and the key still valid (a revoked key's tokens stop with it).
 */
async function tokenCaller(d: RouteDeps, id: string, token: string | undefined): Promise<Caller> {
  const key = openAccessToken(d.auth.secret(TOKEN_PURPOSE), id, token, Date.now());
  return d.auth.authenticate(`Bearer ${key}`).catch((e: unknown) => {
    if (e instanceof WarrenError && e.code === 'unauthenticated')
      throw new WarrenError('unauthenticated', 'the key this X-Access-Token was given to is no longer valid');
    throw e;
  });
}

/**
 * `/health` as E2B's proxy answers it: 204 while the sandbox runs, 502 (its agent unreachable)
 * once it has ended or while it is paused, which the SDKs read as "not running". The call
 * carries the sandbox's token as the others do.
 */
async function health(d: RouteDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  try {
    const id = sandboxOf(req);
    const caller = await tokenCaller(d, id, req.headers['x-access-token'] as string | undefined);
    const rec = await d.sandboxes.record(caller, id);
    const running =
      rec.state === 'running' && (rec.expiresAt === null || rec.expiresAt > Date.now()) && (await d.sandboxes.toApi(rec, false)).state === 'running';
    res.writeHead(running ? 204 : 502).end();
  } catch (e) {
    const w = e instanceof WarrenError ? e : new WarrenError('internal', 'internal error');
    sendJson(res, w.status, { code: w.status, message: w.message });
  }
}

/**
 * A sandbox's agent under E2B_SANDBOX_URL (`/e2b/envd/...`): `/health`, `/files` and the Connect
 * RPC services `process.Process` and `filesystem.Filesystem`. Calls carry the sandbox's access
 * token (X-Access-Token) instead of an API key; they act as the key the token was given to.
 */
export async function serveEnvd(d: RouteDeps, req: IncomingMessage, res: ServerResponse, path: string, url: URL): Promise<void> {
  if (path === '/health') return health(d, req, res);
  const rpc = /^\/([a-z]+\.[A-Za-z]+)\/([A-Za-z]+)$/.exec(path);
  const stream = isStreamRequest(req);
  const scope: AuditScope = {};
  const audited = path === '/files' ? req.method === 'POST' : MUTATING.has(rpc?.[2] ?? '');
  const record = (status: number, error: { code: string } | null): void => {
    if (audited) recordCall(d.audit, { method: req.method ?? 'POST', path: url.pathname, scope, status, error });
  };
  try {
    const id = sandboxOf(req);
    scope.sandbox = id;
    const caller = await tokenCaller(d, id, req.headers['x-access-token'] as string | undefined);
    scope.caller = caller;
    const agent: Agent = { caller, id, user: userOf(req), defaultUser: await d.sandboxes.defaultUser(caller, id) };
    if (path === '/files') {
      await serveFiles(d, agent, req, res, url);
      return record(res.statusCode, null);
    }
    const call = rpc ? SERVICES[rpc[1]!]?.[rpc[2]!] : undefined;
    if (!call) throw new ConnectError('unimplemented', `${path} is not served`);
    if (req.method !== 'POST') throw new ConnectError('invalid_argument', 'Connect calls are POSTs');
    const answer = await call(d, agent, await readMessage(req), req, res);
    if (!res.headersSent) sendUnary(res, answer ?? {});
    record(200, null);
  } catch (e) {
    if (path === '/files' || !rpc) {
      // envd's HTTP errors: {code: status, message}; a path Connect refused is a bad argument here.
      const w =
        e instanceof WarrenError
          ? e
          : e instanceof ConnectError
            ? new WarrenError('invalid_argument', e.message)
            : new WarrenError('internal', 'internal error');
      record(w.status, auditedError(w));
      if (res.headersSent) return void res.destroy();
      if (!req.complete) res.setHeader('connection', 'close');
      return sendJson(res, w.status, { code: w.status, message: w.message });
    }
    record(stream ? 200 : connectStatus(e), connectError(e));
    if (res.headersSent) return void res.destroy();
    if (stream) new ConnectStream(res).end(e);
    else sendUnaryError(res, e);
  }
}
