import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PtyQuery, WS_OPCODE, WarrenError, WsDecoder, WsProtocolError, wsAccept, wsClosePayload, wsFrame, type ExecRequest } from '@warren/api';
import type { CommandStream } from '@warren/edge';
import type { Caller } from '../services/sandboxes.js';
import type { RouteDeps } from './route-types.js';
import { auditCall } from './audit-call.js';
import { query } from './io.js';
import { wsCredentials } from './ws-auth.js';

const PTY_PATH = /^\/v1\/sandboxes\/([^/]+)\/pty$/;

/** The shell a terminal runs: the image's bash as a login shell, else its sh. */
const LOGIN_SHELL = 'if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l';
/** The longest a terminal lives (the longest command). */
const PTY_MAX_MS = 24 * 3600 * 1000;
/** How long a hung-up terminal's shell has to end before it is killed. */
const HANG_UP_GRACE_MS = 3000;
/** The largest message a client sends (keystrokes and pastes). */
const MAX_INPUT_MESSAGE = 1024 * 1024;
/**
 * Bytes queued for the client past which neither the terminal's output nor the client's input is
 * read further, until the client has taken them: a client that does not read holds at most this
 * (and one message) in the server, pongs included.
 */
const PTY_OUTPUT_HIGH_WATER = 256 * 1024;
/** How long a client has, after the server's close frame, to close its side before the connection is cut. */
const CLOSE_GRACE_MS = 5000;
/**
 * How often a ping goes to a client whose input waits on the sandbox. Its socket is not read
 * meanwhile, so a client gone is not seen; a write to a connection its peer closed fails (the
 * second one at the latest), and that close hangs the terminal up.
 */
const PAUSED_PROBE_MS = 2000;

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
 * any). A browser, which cannot set Authorization on a WebSocket, offers its key as the
 * subprotocol `warren.bearer.<base64url(key)>` beside `warren` (ws-auth.ts). Binary messages are
 * keystrokes; text messages are JSON: `{"type":"resize","cols","rows"}`.
 * The terminal's output comes as binary messages; at its end a text message
 * `{"type":"exit","exitCode","signal"}` and a close. A client that goes away hangs the terminal
 * up (SIGHUP), as closing a terminal window does. Each session opened (or refused) is an audit
 * entry, as a call of the contract is.
 *
 * Both ways honour backpressure: the client's next frame is not read while its last input is
 * still on its way into the sandbox (the sandbox's pace is the client's), and nothing more is
 * read (output or input) while the client has not taken what was sent to it.
 */
export async function servePty(d: RouteDeps, req: IncomingMessage, socket: Duplex, head: Buffer, id: string, url: URL): Promise<void> {
  const key = req.headers['sec-websocket-key'];
  if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket' || typeof key !== 'string' || req.headers['sec-websocket-version'] !== '13')
    throw new WarrenError('invalid_argument', 'a terminal is a WebSocket (version 13): send Upgrade: websocket with a Sec-WebSocket-Key');
  let caller: Caller | null = null;
  let stream: CommandStream;
  let protocol: string | null = null;
  try {
    const credentials = wsCredentials(req.headers);
    protocol = credentials.protocol;
    caller = await d.auth.authenticate(credentials.authorization);
    const size = query(url, PtyQuery);
    const exec: ExecRequest = { cmd: ['/bin/sh', '-c', LOGIN_SHELL], pty: { cols: size.cols ?? 80, rows: size.rows ?? 24 }, timeoutMs: PTY_MAX_MS, tag: 'pty' };
    stream = await d.commands.exec(caller, id, exec, false);
  } catch (e) {
    const err = e instanceof WarrenError ? e : new WarrenError('internal', 'internal error');
    auditCall(d.audit, { method: 'GET', path: url.pathname, caller, sandbox: id, status: err.status, code: err.code });
    throw e;
  }
  auditCall(d.audit, { method: 'GET', path: url.pathname, caller, sandbox: id, status: 101, code: null });
  socket.write(
    [
      'HTTP/1.1 101 Switching Protocols',
      'Upgrade: websocket',
      'Connection: Upgrade',
      `Sec-WebSocket-Accept: ${wsAccept(key)}`,
      ...(protocol ? [`Sec-WebSocket-Protocol: ${protocol}`] : []),
      `X-Command-Id: ${stream.commandId}`,
      '',
      '',
    ].join('\r\n'),
  );
  await terminalSession(d, caller, id, stream, socket, head);
}

/** A terminal's WebSocket after the handshake, until its shell ends or the client goes. */
async function terminalSession(d: RouteDeps, caller: Caller, id: string, stream: CommandStream, socket: Duplex, head: Buffer): Promise<void> {
  const commandId = stream.commandId;
  const decoder = new WsDecoder(true, MAX_INPUT_MESSAGE);
  let open = true;
  /** A chunk of input is being handed on: the socket stays paused. */
  let inputBusy = false;
  const send = (opcode: number, payload: Buffer): void => {
    if (open && socket.writable) socket.write(wsFrame(opcode, payload, false));
  };
  const onData = (chunk: Buffer): void => {
    socket.pause();
    inputBusy = true;
    void take(chunk).finally(() => {
      inputBusy = false;
      resumeInput();
    });
  };
  /** Sends a close frame and reads no more: what still comes is dropped, and a client that does not close in time is cut off. */
  const close = (code: number, reason = ''): void => {
    if (!open) return;
    send(WS_OPCODE.close, wsClosePayload(code, reason));
    open = false;
    socket.off('data', onData);
    socket.resume();
    socket.end();
    setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref();
  };
  // A shell hung up while it starts may miss the SIGHUP (bash acts on it only at its prompt): what
  // still runs a while later is killed, so no terminal outlives its connection. The signals do not
  // wait behind input the sandbox has not taken.
  let hungUp = false;
  const hangUp = (): void => {
    if (hungUp) return;
    hungUp = true;
    const signal = (name: string): Promise<void> => d.commands.signal(caller, id, commandId, name).catch(() => undefined);
    void signal('SIGHUP');
    setTimeout(() => void signal('SIGKILL'), HANG_UP_GRACE_MS).unref();
  };
  /** Hands one input to the sandbox, returning when it took it. A command that has ended takes no more (its exit follows); any other failure ends the terminal. */
  const deliver = async (call: Promise<void>): Promise<void> => {
    try {
      await call;
    } catch (e) {
      if (e instanceof WarrenError && e.code === 'conflict') return;
      hangUp();
      close(1011, e instanceof WarrenError ? e.message.slice(0, 100) : 'internal error');
    }
  };

  // Input: a chunk at a time, its messages in order, each handed on before the next is looked at.
  const take = async (chunk: Buffer): Promise<void> => {
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
      if (!open) return;
      if (m.opcode === WS_OPCODE.binary) {
        if (m.payload.length) await deliver(d.commands.stdin(caller, id, commandId, m.payload, false));
      } else if (m.opcode === WS_OPCODE.text) {
        const r = control(m.payload.toString('utf8'));
        if (!r) {
          hangUp();
          close(1007, 'a text message is {"type":"resize","cols":N,"rows":N}');
          return;
        }
        await deliver(d.commands.resize(caller, id, commandId, r));
      } else if (m.opcode === WS_OPCODE.ping) send(WS_OPCODE.pong, m.payload);
      else if (m.opcode === WS_OPCODE.close) {
        hangUp();
        close(1000);
        return;
      }
    }
  };
  /** Reads the client again once its last input is handed on and it has taken what it was sent. */
  const resumeInput = (): void => {
    if (open && !inputBusy && socket.writableLength <= PTY_OUTPUT_HIGH_WATER) socket.resume();
  };
  const probe = setInterval(() => {
    if (inputBusy && socket.writableLength <= PTY_OUTPUT_HIGH_WATER) send(WS_OPCODE.ping, Buffer.alloc(0));
  }, PAUSED_PROBE_MS).unref();
  socket.on('data', onData);
  socket.on('drain', resumeInput);
  socket.on('error', () => undefined);
  socket.once('close', () => {
    clearInterval(probe);
    if (open) hangUp();
    open = false;
  });
  if (head.length) onData(head);

  // Output: the next event only once the client has taken what it was sent.
  const it = stream.events[Symbol.asyncIterator]();
  try {
    while (open) {
      if (socket.writableLength > PTY_OUTPUT_HIGH_WATER) {
        await drained(socket);
        continue;
      }
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

/** Resolves when the socket has sent all it was given, or has closed. */
function drained(socket: Duplex): Promise<void> {
  if (socket.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
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
