import { ERROR_CODES, ROUTES, WarrenError, type ErrorCode } from '@warren/api';
import { readBody } from './io.js';
import { streamCommand } from './ndjson.js';
import type { On, RouteDeps } from './route-types.js';

const isErrorCode = (c: string): c is ErrorCode => (ERROR_CODES as readonly string[]).includes(c);

/** Exec, command re-reads, kill, stdin and shell sessions. */
export function commandRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.exec, async (c) => {
    const body = await c.body();
    const accept = c.req.headers.accept ?? '';
    if (accept.includes('application/json') && !accept.includes('ndjson')) {
      const r = await d.commands.exec(c.caller, c.params.id, body, true);
      if (r.end.type === 'error') throw new WarrenError(isErrorCode(r.end.error.code) ? r.end.error.code : 'internal', r.end.error.message);
      const { type: _t, ...exit } = r.end;
      c.reply({ commandId: r.commandId, stdout: r.stdout, stderr: r.stderr, ...exit });
      return;
    }
    await streamCommand(c.res, await d.commands.exec(c.caller, c.params.id, body, false), true);
  });
  on(ROUTES.commandOutput, async (c) => {
    const q = c.query();
    const offset = q.offset ?? 0;
    await streamCommand(c.res, await d.commands.follow(c.caller, c.params.id, c.params.commandId, offset), offset === 0);
  });
  on(ROUTES.killCommand, async (c) => {
    const body = await c.body();
    await d.commands.signal(c.caller, c.params.id, c.params.commandId, body.signal ?? 'SIGTERM');
    c.reply();
  });
  on(ROUTES.pty, async () => {
    throw new WarrenError('invalid_argument', 'a terminal is a WebSocket: send Upgrade: websocket (GET /v1/sandboxes/{id}/pty)');
  });
  on(ROUTES.listCommands, async (c) => {
    c.reply({ commands: await d.commands.list(c.caller, c.params.id, c.query().finished ?? false) });
  });
  on(ROUTES.resizeCommand, async (c) => {
    await d.commands.resize(c.caller, c.params.id, c.params.commandId, await c.body());
    c.reply();
  });
  on(ROUTES.commandStdin, async (c) => {
    // A sandbox that is not live answers before its body is read.
    await d.sandboxes.check(c.caller, c.params.id);
    const { eof } = c.query();
    const data = await readBody(c.req, 16 * 1024 * 1024);
    await d.commands.stdin(c.caller, c.params.id, c.params.commandId, data, eof ?? false);
    c.reply();
  });
  on(ROUTES.createSession, async (c) => {
    const body = await c.body();
    c.reply({ sessionId: await d.commands.createSession(c.caller, c.params.id, body) });
  });
  on(ROUTES.deleteSession, async (c) => {
    await d.commands.deleteSession(c.caller, c.params.id, c.params.sessionId);
    c.reply();
  });
}
