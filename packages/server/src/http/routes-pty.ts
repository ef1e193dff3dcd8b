import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PtyQuery, WS_OPCODE, WarrenError, WsDecoder, WsProtocolError, wsAccept, wsClosePayload, wsFrame, type ExecRequest } from '@warren/api';
import type { RouteDeps } from './route-types.js';
import { query } from './io.js';

const PTY_PATH = /^\/v1\/sandboxes\/([^/]+)\/pty$/;

/** The shell a terminal runs: the image's bash as a login shell, else its sh. */
const LOGIN_SHELL = 'if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l';
/** The longest a terminal lives (the longest command). */
const PTY_MAX_MS = 24 * 3600 * 1000;
/** How long a hung-up terminal's shell has to end before it is killed. */
const HANG_UP_GRACE_MS = 3000;
/** The largest message a client sends (keystrokes and pastes). */
const MAX_INPUT_MESSAGE = 1024 * 1024;

/** The sandbox of a terminal's path, or null if the path is another's. */
export function matchPtyPath(url: URL): string | null {
  const m = PTY_PATH.exec(url.pathname);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    throw new WarrenError('invalid_argument', 'the sandbox id in the path is not valid percent-encoding');
  }
}

/**
 * `GET /v1/sandboxes/{id}/pty?cols=&rows=` upgraded to a WebSocket: a login shell on a new
 * terminal in the sandbox (a command with `pty`, so it is listed, signalled and re-read like
 * any). Binary messages are keystrokes; text messages are JSON: `{"type":"resize","cols","rows"}`.
 * The terminal's output comes as binary messages; at its end a text message
 * `{"type":"exit","exitCode","signal"}` and a close. A client that goes away hangs the terminal
 * up (SIGHUP), as closing a terminal window does.
 */
export async function servePty(d: RouteDeps, req: IncomingMessage, socket: Duplex, head: Buffer, id: string, url: URL): Promise<void> {
  const key = req.headers['sec-websocket-key'];
  if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket' || typeof key !== 'string' || req.headers['sec-websocket-version'] !== '13')
    throw new WarrenError('invalid_argument', 'a terminal is a WebSocket (version 13): send Upgrade: websocket with a Sec-WebSocket-Key');
  const caller = await d.auth.authenticate(req.headers.authorization);
  const size = query(url, PtyQuery);
  const exec: ExecRequest = { cmd: ['/bin/sh', '-c', LOGIN_SHELL], pty: { cols: size.cols ?? 80, rows: size.rows ?? 24 }, timeoutMs: PTY_MAX_MS, tag: 'pty' };
  const stream = await d.commands.exec(caller, id, exec, false);
  const commandId = stream.commandId;
  socket.write(
    [
      'HTTP/1.1 101 Switching Protocols',
      'Upgrade: websocket',
      'Connection: Upgrade',
      `Sec-WebSocket-Accept: ${wsAccept(key)}`,
      `X-Command-Id: ${commandId}`,
      '',
      '',
    ].join('\r\n'),
  );
  let open = true;
  const send = (opcode: number, payload: Buffer): void => {
    if (open && socket.writable) socket.write(wsFrame(opcode, payload, false));
  };
  const close = (code: number, reason = ''): void => {
    send(WS_OPCODE.close, wsClosePayload(code, reason));
    open = false;
    socket.end();
  };
  // Input goes in order, one call at a time.
  let inputs: Promise<unknown> = Promise.resolve();
  const input = (fn: () => Promise<unknown>): void => {
    inputs = inputs.then(fn).catch(() => undefined);
  };
  // A shell hung up while it starts may miss the SIGHUP (bash acts on it only at its prompt): what
  // still runs a while later is killed, so no terminal outlives its connection.
  let hungUp = false;
  const hangUp = (): void => {
    if (hungUp) return;
    hungUp = true;
    input(() => d.commands.signal(caller, id, commandId, 'SIGHUP'));
    setTimeout(() => input(() => d.commands.signal(caller, id, commandId, 'SIGKILL')), HANG_UP_GRACE_MS).unref();
  };

  const decoder = new WsDecoder(true, MAX_INPUT_MESSAGE);
  const onData = (chunk: Buffer): void => {
    let messages;
    try {
      messages = decoder.push(chunk);
    } catch (e) {
      const pe = e instanceof WsProtocolError ? e : new WsProtocolError('bad frame', 1002);
      hangUp();
      close(pe.closeCode, pe.message);
      return;
    }
    for (const m of messages) {
      if (m.opcode === WS_OPCODE.binary) {
        if (m.payload.length) input(() => d.commands.stdin(caller, id, commandId, m.payload, false));
      } else if (m.opcode === WS_OPCODE.text) {
        const r = control(m.payload.toString('utf8'));
        if (!r) {
          hangUp();
          close(1007, 'a text message is {"type":"resize","cols":N,"rows":N}');
          return;
        }
        input(() => d.commands.resize(caller, id, commandId, r));
      } else if (m.opcode === WS_OPCODE.ping) send(WS_OPCODE.pong, m.payload);
      else if (m.opcode === WS_OPCODE.close) {
        hangUp();
        close(1000);
        return;
      }
    }
  };
  socket.on('data', onData);
  socket.on('error', () => undefined);
  socket.once('close', () => {
    if (open) hangUp();
    open = false;
  });
  if (head.length) onData(head);

  const it = stream.events[Symbol.asyncIterator]();
  try {
    while (open) {
      const r = await it.next();
      if (r.done) break;
      const ev = r.value;
      if (ev.type === 'stdout' || ev.type === 'stderr') send(WS_OPCODE.binary, Buffer.from(ev.data, 'utf8'));
      else if (ev.type === 'exit') {
        send(WS_OPCODE.text, Buffer.from(JSON.stringify({ type: 'exit', exitCode: ev.exitCode, signal: ev.signal })));
        close(1000);
      } else if (ev.type === 'error') {
        send(WS_OPCODE.text, Buffer.from(JSON.stringify(ev)));
        close(1011, ev.error.message.slice(0, 100));
      }
    }
  } catch (e) {
    // After the handshake an error can only close the WebSocket.
    hangUp();
    close(1011, e instanceof WarrenError ? e.message.slice(0, 100) : 'internal error');
  } finally {
    await it.return?.();
  }
}

/** A text message's resize, or null if it is none. */
function control(text: string): { cols: number; rows: number } | null {
  try {
    const v = JSON.parse(text) as { type?: unknown; cols?: unknown; rows?: unknown };
    const ok = (n: unknown): n is number => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= 10_000;
    return v.type === 'resize' && ok(v.cols) && ok(v.rows) ? { cols: v.cols, rows: v.rows } : null;
  } catch {
    return null;
  }
}
