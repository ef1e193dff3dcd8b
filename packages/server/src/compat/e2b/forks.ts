import type { IncomingMessage, ServerResponse } from 'node:http';
import { ImageName, WarrenError, z, type Sandbox } from '@warren/api';
import { jsonBody, sendEmpty, sendJson } from '../../http/io.js';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';
import { E2bTtlSeconds } from './requests.js';

/** E2B's fork TTL when a fork names none (its API's documented default), in seconds. */
export const E2B_FORK_TIMEOUT_S = 15;

const ForkBody = z.looseObject({
  count: z.number().int().min(1).max(100).optional(),
  timeout: E2bTtlSeconds.optional(),
});
const SnapshotBody = z.looseObject({ name: ImageName.optional() });

/** E2B's SnapshotInfo of a Warren snapshot: its name is its id (as a named E2B snapshot's is). */
const snapshotInfo = (name: string): { snapshotID: string; names: string[] } => ({ snapshotID: name, names: [name] });

/**
 * `POST /sandboxes/{id}/fork`: one entry per fork asked for, each a sandbox or an error with
 * E2B's code (the HTTP status); the children's TTL is E2B's fork default unless named.
 */
export async function e2bFork(
  d: RouteDeps,
  c: Caller,
  id: string,
  req: IncomingMessage,
  res: ServerResponse,
  answer: (s: Sandbox) => Record<string, unknown>,
): Promise<void> {
  const b = await jsonBody(req, ForkBody);
  const r = await d.forks.fork(c, id, { count: b.count ?? 1, lifetime: { ttlSeconds: b.timeout ?? E2B_FORK_TIMEOUT_S } });
  const errors = r.errors.map((e) => {
    const w = new WarrenError(e.code as WarrenError['code'], e.message);
    return { error: { code: w.status, message: w.message } };
  });
  sendJson(res, 201, [...r.sandboxes.map((s) => ({ sandbox: answer(s) })), ...errors]);
}

/** `POST /sandboxes/{id}/snapshots`: a snapshot named as asked (or one made), as E2B's SnapshotInfo. */
export async function e2bCreateSnapshot(d: RouteDeps, c: Caller, id: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const b = await jsonBody(req, SnapshotBody);
  const img = await d.snapshots.create(c, id, b.name === undefined ? {} : { name: b.name });
  sendJson(res, 201, snapshotInfo(img.name));
}

/**
 * `GET /snapshots` (filtered by `sandboxID` and `name`) and `DELETE /templates/{id}` (how E2B's
 * SDK deletes a snapshot); answers false for any other path.
 */
export async function serveE2bSnapshots(
  d: RouteDeps,
  caller: () => Promise<Caller>,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  url: URL,
): Promise<boolean> {
  if (req.method === 'GET' && path === '/snapshots') {
    const q = { sandbox: url.searchParams.get('sandboxID') ?? undefined, name: url.searchParams.get('name') ?? undefined };
    sendJson(
      res,
      200,
      (await d.snapshots.list(await caller(), q)).map((s) => snapshotInfo(s.name)),
    );
    return true;
  }
  const m = /^\/templates\/([^/]+)$/.exec(path);
  if (req.method === 'DELETE' && m) {
    // E2B refuses to delete a template paused sandboxes were made from, never one running ones
    // use: so does this path (though a paused Warren sandbox keeps its layers all the same).
    await d.snapshots.delete(await caller(), decodeURIComponent(m[1]!), { refuseWhile: ['paused'] });
    sendEmpty(res);
    return true;
  }
  return false;
}
