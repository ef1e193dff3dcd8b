import * as api from '@warren/api';
import { ERROR_CODES, ROUTES, WarrenError, type ErrorCode } from '@warren/api';
import { jsonBody, query, readBody, sendEmpty, sendJson } from './io.js';
import { streamCommand } from './ndjson.js';
import { liveSandboxId, sandboxId, type Authed, type On, type RouteDeps } from './route-types.js';

const isErrorCode = (c: string): c is ErrorCode => (ERROR_CODES as readonly string[]).includes(c);

/** Exec, command re-reads, kill, stdin and shell sessions. */
export function commandRoutes(on: On, d: RouteDeps): void {
  const liveId = (c: Authed): string => liveSandboxId(d, c);
  on(ROUTES.exec, async (c) => {
    const body = await jsonBody(c.req, api.ExecRequest);
    const cmd = await d.sandboxes.exec(c.caller, sandboxId(c), body);
    const accept = c.req.headers.accept ?? '';
    if (accept.includes('application/json') && !accept.includes('ndjson')) {
      const end = await cmd.wait();
      if (end.type === 'error') throw new WarrenError(isErrorCode(end.error.code) ? end.error.code : 'internal', end.error.message);
      if (end.type !== 'exit') throw new WarrenError('internal', 'command ended without exit');
      const { type: _t, ...exit } = end;
      sendJson(c.res, 200, { commandId: cmd.id, stdout: cmd.text('stdout'), stderr: cmd.text('stderr'), ...exit });
      return;
    }
    await streamCommand(c.res, cmd, 0, true);
  });
  on(ROUTES.commandOutput, async (c) => {
    const q = query(c.url, api.CommandOutputQuery);
    const cmd = d.edge.command(liveId(c), c.params.commandId ?? '');
    await streamCommand(c.res, cmd, q.offset ?? 0, (q.offset ?? 0) === 0);
  });
  on(ROUTES.killCommand, async (c) => {
    const body = await jsonBody(c.req, api.KillRequest);
    d.edge.command(liveId(c), c.params.commandId ?? '').signal(body.signal ?? 'SIGTERM');
    sendEmpty(c.res);
  });
  on(ROUTES.commandStdin, async (c) => {
    const cmd = d.edge.command(liveId(c), c.params.commandId ?? '');
    const data = await readBody(c.req, 16 * 1024 * 1024);
    if (data.length) cmd.writeStdin(data);
    if (c.url.searchParams.get('eof') === '1') cmd.closeStdin();
    sendEmpty(c.res);
  });
  on(ROUTES.createSession, async (c) => {
    const sid = liveId(c);
    const body = await jsonBody(c.req, api.CreateSessionRequest);
    sendJson(c.res, 201, { sessionId: await d.edge.createSession(sid, body) });
  });
  on(ROUTES.deleteSession, async (c) => {
    await d.edge.deleteSession(liveId(c), c.params.sessionId ?? '');
    sendEmpty(c.res);
  });
}
