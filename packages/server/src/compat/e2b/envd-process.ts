import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, type CommandInfo, type ExecRequest } from '@warren/api';
import { Hangup, SHELL } from '@warren/edge';
import type { RouteDeps } from '../../http/route-types.js';
import { absolute, type Agent, type Call } from './agent.js';
import { ConnectError, ConnectStream } from './connect.js';
import { execRequest, terminalSize } from './requests.js';

/** The longest a command may run when its caller sets no timeout (E2B's 0: none). */
const MAX_COMMAND_MS = 24 * 3600 * 1000;

/**
 * The keepalive interval a stream asks for (`keepalive-ping-interval`, seconds), within 1 s and
 * 10 min (E2B's SDKs ask for 50 s); none when it asks for none or for something that is no number.
 */
export function keepaliveMs(req: IncomingMessage): number | null {
  const s = Number(req.headers['keepalive-ping-interval'] ?? 0);
  if (!Number.isFinite(s) || s <= 0) return null;
  return Math.min(Math.max(s, 1), 600) * 1000;
}

/** The command a process selector names (by pid, or by tag). */
async function commandOf(d: RouteDeps, a: Agent, msg: Record<string, unknown>): Promise<CommandInfo> {
  const sel = ((msg.process as Record<string, unknown> | undefined)?.pid ?? undefined) as number | undefined;
  const tag = (msg.process as Record<string, unknown> | undefined)?.tag as string | undefined;
  const all = await d.commands.list(a.caller, a.id);
  const found = all.find((c) => (sel !== undefined ? c.pid === Number(sel) : tag !== undefined && c.tag === tag));
  if (!found) throw new ConnectError('not_found', `process ${sel ?? tag ?? '?'} not found`);
  return found;
}

const b64 = (v: unknown): Buffer => (typeof v === 'string' ? Buffer.from(v, 'base64') : Buffer.alloc(0));

type Event = {
  type: string;
  data?: string;
  exitCode?: number | null;
  signal?: string | null;
  timedOut?: boolean;
  killedBy?: string | null;
  error?: { code: string; message: string };
};

/** What envd's end event says of a command the OOM killer or a kill request ended (its `error`; none for an exit). */
const KILLED: Record<string, string> = {
  oom: 'out of memory: killed by the kernel at the sandbox’s memory limit',
  request: 'killed on request',
};

/**
 * Streams a command's events in E2B's process events (start with its pid, data, end), with
 * keepalives; each event waits for the client to take the one before (ConnectStream.send).
 */
async function streamProcess(req: IncomingMessage, res: ServerResponse, events: AsyncIterable<unknown>, pid: number, pty: boolean): Promise<void> {
  const out = new ConnectStream(res);
  await out.send({ event: { start: { pid } } });
  const every = keepaliveMs(req);
  const ping = every ? setInterval(() => out.ping({ event: { keepalive: {} } }), every) : null;
  const it = (events as AsyncIterable<Event>)[Symbol.asyncIterator]();
  // Not Promise.race with one promise the connection's length: that holds every event raced.
  const hangup = new Hangup(res);
  try {
    for (;;) {
      const r = await hangup.race(it.next());
      if (r === 'gone' || r.done) break;
      const ev = r.value;
      if (ev.type === 'stdout' || ev.type === 'stderr') {
        const data = Buffer.from(ev.data ?? '', 'utf8').toString('base64');
        await out.send({ event: { data: pty ? { pty: data } : { [ev.type]: data } } });
      } else if (ev.type === 'exit') {
        if (ev.timedOut) {
          out.end(new ConnectError('deadline_exceeded', 'the command ran past its timeout and was killed'));
          return;
        }
        const code = ev.exitCode ?? -1;
        const status = ev.signal ? `signal: ${ev.signal.replace(/^SIG/, '').toLowerCase()}` : `exit status ${code}`;
        const error = ev.killedBy ? KILLED[ev.killedBy] : undefined;
        await out.send({ event: { end: { exitCode: code, exited: ev.signal === null, status, ...(error ? { error } : {}) } } });
        out.end();
        return;
      } else if (ev.type === 'error') {
        // The sandbox went away (killed, ended): its stream is cut as envd's is when its sandbox
        // dies, so that the SDK asks /health and says what happened.
        if (ev.error?.code === 'unavailable') return void res.destroy();
        out.end(new WarrenError((ev.error?.code ?? 'internal') as never, ev.error?.message ?? 'the command failed'));
        return;
      }
    }
  } finally {
    if (ping) clearInterval(ping);
    await it.return?.();
  }
  out.end();
}

/** The shell E2B's SDKs run every command with. */
const E2B_SHELL = '/bin/bash';
/** Sandboxes whose image has no /bin/bash (the platform's own then runs their commands), per control plane. */
const noBash = new WeakMap<RouteDeps, Map<string, boolean>>();

/**
 * The program a Start runs: the one it names, but for /bin/bash in an image that has none
 * (busybox, distroless), where the platform's own static bash stands in. Asked once a sandbox.
 */
async function programOf(d: RouteDeps, a: Agent, cmd: string): Promise<string> {
  if (cmd !== E2B_SHELL) return cmd;
  let seen = noBash.get(d);
  if (!seen) noBash.set(d, (seen = new Map<string, boolean>()));
  let missing = seen.get(a.id);
  if (missing === undefined) {
    missing = await d.files.stat(a.caller, a.id, E2B_SHELL).then(
      () => false,
      (e: unknown) => e instanceof WarrenError && e.code === 'not_found',
    );
    if (seen.size >= 10_000) seen.clear();
    seen.set(a.id, missing);
  }
  return missing ? SHELL : cmd;
}

/** A Start's terminal size, when it asks for a terminal. */
const ptyOf = (msg: Record<string, unknown>): { cols: number; rows: number } | null => {
  const pty = msg.pty as { size?: { cols?: unknown; rows?: unknown } } | undefined;
  if (!pty) return null;
  return terminalSize({ cols: pty.size?.cols ?? 80, rows: pty.size?.rows ?? 24 });
};

/** E2B's `process.Process` service on Warren's commands. */
export const PROCESS: Record<string, Call> = {
  async Start(d, a, msg, req, res) {
    const p = (msg.process ?? {}) as { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown };
    if (typeof p.cmd !== 'string' || !p.cmd) throw new ConnectError('invalid_argument', 'process.cmd is needed');
    const args = Array.isArray(p.args) ? p.args.map(String) : [];
    const size = ptyOf(msg);
    const timeout = Number(req.headers['connect-timeout-ms'] ?? 0);
    const exec: ExecRequest = execRequest({
      cmd: [await programOf(d, a, p.cmd), ...args],
      env: (p.envs ?? undefined) as Record<string, string> | undefined,
      cwd: typeof p.cwd === 'string' && p.cwd ? absolute(p.cwd, a) : undefined,
      user: a.user,
      timeoutMs: timeout > 0 && Number.isFinite(timeout) ? Math.min(Math.ceil(timeout), MAX_COMMAND_MS) : MAX_COMMAND_MS,
      keepStdinOpen: msg.stdin === true || size !== null,
      // envd streams a process's output for as long as it runs: the last 10 MiB are kept for Connect.
      keepOutput: 'last',
      ...(size ? { pty: size } : {}),
      ...(msg.tag !== undefined ? { tag: msg.tag as string } : {}),
    });
    const s = await d.commands.exec(a.caller, a.id, exec, false);
    await streamProcess(req, res, s.events, s.pid ?? 0, size !== null);
  },
  async Connect(d, a, msg, req, res) {
    const c = await commandOf(d, a, msg);
    const s = await d.commands.follow(a.caller, a.id, c.commandId, 0);
    await streamProcess(req, res, s.events, c.pid, c.pty);
  },
  async List(d, a) {
    const all = await d.commands.list(a.caller, a.id);
    return {
      processes: all.map((c) => {
        const [cmd, ...args] = typeof c.cmd === 'string' ? ['/bin/sh', '-c', c.cmd] : c.cmd;
        return { config: { cmd, args, envs: c.env, ...(c.cwd ? { cwd: c.cwd } : {}) }, pid: c.pid, ...(c.tag ? { tag: c.tag } : {}) };
      }),
    };
  },
  async SendInput(d, a, msg) {
    const c = await commandOf(d, a, msg);
    const input = (msg.input ?? {}) as { stdin?: unknown; pty?: unknown };
    await d.commands.stdin(a.caller, a.id, c.commandId, b64(input.stdin ?? input.pty), false);
    return {};
  },
  async SendSignal(d, a, msg) {
    const c = await commandOf(d, a, msg);
    const sig = msg.signal === 'SIGNAL_SIGKILL' || msg.signal === 9 ? 'SIGKILL' : msg.signal === 'SIGNAL_SIGTERM' || msg.signal === 15 ? 'SIGTERM' : null;
    if (!sig) throw new ConnectError('invalid_argument', 'signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM');
    await d.commands.signal(a.caller, a.id, c.commandId, sig);
    return {};
  },
  async CloseStdin(d, a, msg) {
    const c = await commandOf(d, a, msg);
    await d.commands.stdin(a.caller, a.id, c.commandId, Buffer.alloc(0), true);
    return {};
  },
  async Update(d, a, msg) {
    const c = await commandOf(d, a, msg);
    const size = (msg.pty as { size?: unknown } | undefined)?.size;
    if (size) await d.commands.resize(a.caller, a.id, c.commandId, terminalSize(size));
    return {};
  },
};
