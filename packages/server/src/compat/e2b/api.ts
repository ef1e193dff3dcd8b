import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, z, type Sandbox } from '@warren/api';
import { jsonBody, sendEmpty, sendJson } from '../../http/io.js';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';
import type { AuditScope } from '../audit.js';
import { listPage, listQuery, templateOf } from './list.js';
import { metrics } from './metrics.js';
import { E2bTtlSeconds, createRequest } from './requests.js';
import { e2bCreateSnapshot, e2bFork, serveE2bSnapshots } from './forks.js';
import { accessToken, warrenKeyOf } from './tokens.js';

/**
 * The agent version Warren claims (E2B's SDKs turn features on by it): 0.6.4, with everything
 * before it served: the default user chosen by the sandbox (0.4.0), octet-stream uploads and
 * closeStdin (0.5.7), file metadata (0.6.2), watch events with entries (0.6.3), and watches
 * allowed on network mounts (0.6.4: a sandbox here has none, so the flag changes nothing).
 */
export const ENVD_VERSION = '0.6.4';

/**
 * E2B's template names Warren serves under another name, with the user and directory E2B's
 * sandboxes of it have; any other name is a Warren image's, run as that image says.
 */
const TEMPLATES: Record<string, { image: string; user: string; workdir: string }> = {
  base: { image: 'debian-python:latest', user: 'user', workdir: '/home/user' },
};
/** The label a sandbox's E2B template name is kept in. */
const TEMPLATE_LABEL = 'e2b.template';
/** E2B's default sandbox timeout (s), when a create names none. */
const DEFAULT_TIMEOUT_S = 300;

const NewSandbox = z.looseObject({
  templateID: z.string().min(1).max(256),
  timeout: E2bTtlSeconds.optional(),
  metadata: z.record(z.string(), z.string()).nullable().optional(),
  envVars: z.record(z.string(), z.string()).nullable().optional(),
  autoPause: z.boolean().optional(),
  allow_internet_access: z.boolean().nullable().optional(),
});
const Timeout = z.looseObject({
  timeout: z
    .number()
    .int()
    .min(0)
    .max(30 * 86400)
    .optional(),
});

/** E2B's error body: the HTTP status as `code`, and a message. */
export function sendE2bError(res: ServerResponse, e: unknown): void {
  const err = e instanceof WarrenError ? e : new WarrenError('internal', 'internal error');
  if (err.code === 'resource_exhausted') res.setHeader('retry-after', '1');
  sendJson(res, err.status, { code: err.status, message: err.message });
}

const stateOf = (s: Sandbox): 'running' | 'paused' | null => (s.state === 'running' || s.state === 'paused' ? s.state : null);

/** E2B's view of a Warren sandbox (ListedSandbox; SandboxDetail with the token). */
function listed(s: Sandbox): Record<string, unknown> {
  const { [TEMPLATE_LABEL]: _template, ...metadata } = s.labels;
  return {
    sandboxID: s.id,
    templateID: templateOf(s, TEMPLATE_LABEL),
    clientID: 'warren',
    cpuCount: s.resources.cpu,
    memoryMB: s.resources.memoryMiB,
    diskSizeMB: s.resources.diskMiB ?? 0,
    envdVersion: ENVD_VERSION,
    startedAt: s.createdAt,
    endAt: s.expiresAt ?? new Date(Date.parse(s.createdAt) + 30 * 86400_000).toISOString(),
    state: stateOf(s) ?? 'running',
    metadata,
  };
}

/** The secret E2B access tokens are sealed under (tokens.ts). */
export const TOKEN_PURPOSE = 'e2b-envd-token';

/**
 * The control plane's answers under E2B_API_URL (`/e2b/...`). Answers false for a path it does
 * not serve. `audit` is told who called and on which sandbox, for the call's audit entry.
 */
export async function serveE2bApi(d: RouteDeps, req: IncomingMessage, res: ServerResponse, path: string, url: URL, audit: AuditScope): Promise<boolean> {
  const method = req.method ?? 'GET';
  const header = req.headers['x-api-key'];
  let apiKey = '';
  const caller = async (): Promise<Caller> => {
    if (typeof header !== 'string' || !header) throw new WarrenError('unauthenticated', 'missing X-API-KEY');
    apiKey = warrenKeyOf(header);
    const c = await d.auth.authenticate(`Bearer ${apiKey}`);
    audit.caller = c;
    return c;
  };
  const secret = d.auth.secret(TOKEN_PURPOSE);
  // The token carries the key that asked for it: agent calls act as that key while it lives.
  const token = (id: string): string => accessToken(secret, id, apiKey, Date.now());
  const sandboxAnswer = (s: Sandbox, template?: string): Record<string, unknown> => ({
    sandboxID: s.id,
    templateID: template ?? s.labels[TEMPLATE_LABEL] ?? s.image,
    clientID: 'warren',
    envdVersion: ENVD_VERSION,
    envdAccessToken: token(s.id),
    domain: null,
  });

  if (method === 'POST' && (path === '/sandboxes' || path === '/v2/sandboxes')) {
    const c = await caller();
    const b = await jsonBody(req, NewSandbox);
    if (b.autoPause)
      throw new WarrenError('invalid_argument', 'autoPause (pause instead of kill at the timeout) is not served by Warren: the sandbox ends at its timeout');
    if (b.allow_internet_access === false)
      throw new WarrenError('invalid_argument', 'allow_internet_access=false is not served through the E2B API: use Warren network rules');
    const t = TEMPLATES[b.templateID];
    // A snapshot's id is a template's to E2B: it starts with its source's user and workdir.
    const snap = !t && (await d.catalogue.getImage(b.templateID))?.snapshot;
    const s = await d.sandboxes.create(
      c,
      createRequest({
        ...(snap ? { snapshot: b.templateID } : { image: t?.image ?? b.templateID }),
        ...(t ? { user: t.user, workdir: t.workdir } : {}),
        lifetime: { ttlSeconds: b.timeout ?? DEFAULT_TIMEOUT_S },
        env: b.envVars ?? undefined,
        labels: { ...(b.metadata ?? {}), [TEMPLATE_LABEL]: b.templateID },
      }),
    );
    audit.sandbox = s.id;
    sendJson(res, 201, sandboxAnswer(s, b.templateID));
    return true;
  }
  if (method === 'GET' && (path === '/sandboxes' || path === '/v2/sandboxes')) {
    const { page, next } = await listPage(d, await caller(), listQuery(url.searchParams), TEMPLATE_LABEL);
    if (next && path === '/v2/sandboxes') res.setHeader('x-next-token', next);
    sendJson(res, 200, page.map(listed));
    return true;
  }
  if (await serveE2bSnapshots(d, caller, req, res, path, url)) return true;
  const m = /^\/(?:v2\/)?sandboxes\/([^/]+)(\/[a-z]+)?$/.exec(path);
  if (!m) return false;
  const id = decodeURIComponent(m[1]!);
  const op = m[2] ?? '';
  audit.sandbox = id;
  const c = await caller();
  if (method === 'GET' && op === '') {
    const s = await d.sandboxes.toApi(await d.sandboxes.record(c, id));
    if (!stateOf(s)) throw new WarrenError('not_found', `sandbox ${id} has ended`);
    sendJson(res, 200, { ...listed(s), envdAccessToken: token(s.id), domain: null });
  } else if (method === 'DELETE' && op === '') {
    const rec = await d.sandboxes.record(c, id);
    if (rec.state !== 'running' && rec.state !== 'paused') throw new WarrenError('not_found', `sandbox ${id} has ended`);
    await d.sandboxes.delete(c, id);
    sendEmpty(res);
  } else if (method === 'POST' && op === '/timeout') {
    const b = await jsonBody(req, Timeout);
    await d.sandboxes.setTimeout(c, id, Math.max(1, b.timeout ?? DEFAULT_TIMEOUT_S));
    sendEmpty(res);
  } else if (method === 'POST' && op === '/pause') {
    const s = await d.sandboxes.toApi(await d.sandboxes.record(c, id), false);
    if (s.state === 'paused') throw new WarrenError('conflict', `sandbox ${id} is paused already`);
    await d.sandboxes.pause(c, id);
    sendEmpty(res);
  } else if (method === 'POST' && (op === '/connect' || op === '/resume')) {
    const b = await jsonBody(req, Timeout);
    const before = await d.sandboxes.toApi(await d.sandboxes.record(c, id), false);
    if (!stateOf(before)) throw new WarrenError('not_found', `sandbox ${id} has ended`);
    if (before.state === 'paused') await d.sandboxes.resume(c, id);
    // A connect lengthens a sandbox's time, never shortens it (setTimeout does that).
    const end = (await d.sandboxes.record(c, id)).expiresAt;
    if (b.timeout && end !== null && Date.now() + b.timeout * 1000 > end) await d.sandboxes.setTimeout(c, id, b.timeout);
    sendJson(res, before.state === 'paused' ? 201 : 200, sandboxAnswer(before));
  } else if (method === 'POST' && op === '/fork') {
    await e2bFork(d, c, id, req, res, (s) => sandboxAnswer(s));
  } else if (method === 'POST' && op === '/snapshots') {
    await e2bCreateSnapshot(d, c, id, req, res);
  } else if (method === 'GET' && op === '/metrics') {
    sendJson(res, 200, await metrics(d, c, await d.sandboxes.toApi(await d.sandboxes.record(c, id)), url.searchParams));
  } else return false;
  return true;
}
