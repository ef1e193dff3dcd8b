import type { IncomingMessage, ServerResponse } from 'node:http';
import { posix } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { WarrenError, type CommandInfo, type ExecRequest, type FileEntry } from '@warren/api';
import { readBody, sendJson } from '../../http/io.js';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';
import { ConnectError, ConnectStream, isStreamRequest, readMessage, sendUnary, sendUnaryError } from './connect.js';
import { parseMultipart } from './multipart.js';
import { checkAccessToken } from './tokens.js';

/** The longest a command may run when its caller sets no timeout (E2B's 0: none). */
const MAX_COMMAND_MS = 24 * 3600 * 1000;
/** The most a file upload may hold. */
const MAX_UPLOAD = 512 * 1024 * 1024;

/** A sandbox's agent as E2B's SDKs reach it: who calls, in which sandbox, as which user. */
interface Agent {
  caller: Caller;
  id: string;
  /** The user named by the call's Basic authorization (none: the sandbox's own). */
  user: string | undefined;
}

/** The sandbox a request is for: its `E2b-Sandbox-Id` header, else its Host (`49983-{id}.{domain}`). */
function sandboxOf(req: IncomingMessage): string {
  const h = req.headers['e2b-sandbox-id'];
  if (typeof h === 'string' && h) return h;
  const host = /^\d+-([^.]+)\./.exec(String(req.headers.host ?? ''));
  if (host) return host[1]!;
  throw new WarrenError('invalid_argument', 'name the sandbox: an E2b-Sandbox-Id header, or a host 49983-{id}.{domain}');
}

/** The user of a Basic authorization (`user:`), as E2B's SDKs send it. */
function userOf(req: IncomingMessage): string | undefined {
  const m = /^Basic\s+(\S+)$/i.exec(String(req.headers.authorization ?? ''));
  if (!m) return undefined;
  const name = Buffer.from(m[1]!, 'base64').toString('utf8').split(':')[0] ?? '';
  return name || undefined;
}

/** A path as E2B means it: relative ones from the user's home. */
function absolute(path: unknown, user: string | undefined): string {
  if (typeof path !== 'string' || !path) throw new ConnectError('invalid_argument', 'a path is needed');
  if (path.startsWith('/')) return posix.normalize(path);
  const home = !user || user === 'root' ? '/root' : `/home/${user}`;
  return posix.join(home, path);
}

const FILE_TYPES: Record<FileEntry['type'], string> = {
  file: 'FILE_TYPE_FILE',
  dir: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};

/** `ls -l`'s permission string of a mode. */
function permissions(e: FileEntry): string {
  const kind = e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'l' : '-';
  let s = kind;
  for (let shift = 6; shift >= 0; shift -= 3) {
    const bits = (e.mode >> shift) & 7;
    s += (bits & 4 ? 'r' : '-') + (bits & 2 ? 'w' : '-') + (bits & 1 ? 'x' : '-');
  }
  return s;
}

/** E2B's EntryInfo of a Warren file entry. */
function entryInfo(e: FileEntry): Record<string, unknown> {
  return {
    name: e.name,
    type: FILE_TYPES[e.type],
    path: e.path,
    size: String(e.size),
    mode: e.mode,
    permissions: permissions(e),
    owner: '',
    group: '',
    modifiedTime: e.mtime,
    ...(e.target !== undefined ? { symlinkTarget: e.target } : {}),
  };
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

/** What a Connect-RPC call answers: a message (unary) or nothing (it streamed its answer). */
type Call = (d: RouteDeps, a: Agent, msg: Record<string, unknown>, req: IncomingMessage, res: ServerResponse) => Promise<unknown>;

const b64 = (v: unknown): Buffer => (typeof v === 'string' ? Buffer.from(v, 'base64') : Buffer.alloc(0));

/** Streams a command's events in E2B's process events (start with its pid, data, end), with keepalives. */
async function streamProcess(req: IncomingMessage, res: ServerResponse, events: AsyncIterable<unknown>, pid: number, pty: boolean): Promise<void> {
  const out = new ConnectStream(res);
  out.send({ event: { start: { pid } } });
  const every = Number(req.headers['keepalive-ping-interval'] ?? 0);
  const ping = every > 0 ? setInterval(() => out.send({ event: { keepalive: {} } }), Math.max(1, every) * 1000) : null;
  const it = (
    events as AsyncIterable<{
      type: string;
      data?: string;
      exitCode?: number | null;
      signal?: string | null;
      timedOut?: boolean;
      error?: { code: string; message: string };
    }>
  )[Symbol.asyncIterator]();
  const gone = new Promise<'gone'>((resolve) => res.once('close', () => resolve('gone')));
  try {
    for (;;) {
      const r = await Promise.race([it.next(), gone]);
      if (r === 'gone' || r.done) break;
      const ev = r.value;
      if (ev.type === 'stdout' || ev.type === 'stderr') {
        const data = Buffer.from(ev.data ?? '', 'utf8').toString('base64');
        out.send({ event: { data: pty ? { pty: data } : { [ev.type]: data } } });
      } else if (ev.type === 'exit') {
        if (ev.timedOut) {
          out.end(new ConnectError('deadline_exceeded', 'the command ran past its timeout and was killed'));
          return;
        }
        const code = ev.exitCode ?? -1;
        const status = ev.signal ? `signal: ${ev.signal.replace(/^SIG/, '').toLowerCase()}` : `exit status ${code}`;
        out.send({ event: { end: { exitCode: code, exited: ev.signal === null, status } } });
        out.end();
        return;
      } else if (ev.type === 'error') {
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

const PROCESS: Record<string, Call> = {
  async Start(d, a, msg, req, res) {
    const p = (msg.process ?? {}) as { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown };
    if (typeof p.cmd !== 'string' || !p.cmd) throw new ConnectError('invalid_argument', 'process.cmd is needed');
    const args = Array.isArray(p.args) ? p.args.map(String) : [];
    const size = ((msg.pty as { size?: { cols?: number; rows?: number } } | undefined)?.size ?? null) as { cols?: number; rows?: number } | null;
    const timeout = Number(req.headers['connect-timeout-ms'] ?? 0);
    const exec: ExecRequest = {
      cmd: [p.cmd, ...args],
      env: (p.envs ?? undefined) as Record<string, string> | undefined,
      cwd: typeof p.cwd === 'string' && p.cwd ? absolute(p.cwd, a.user) : undefined,
      user: a.user,
      timeoutMs: timeout > 0 ? Math.min(timeout, MAX_COMMAND_MS) : MAX_COMMAND_MS,
      keepStdinOpen: msg.stdin === true || size !== null,
      ...(size ? { pty: { cols: size.cols ?? 80, rows: size.rows ?? 24 } } : {}),
      ...(typeof msg.tag === 'string' ? { tag: msg.tag } : {}),
    };
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
    const size = (msg.pty as { size?: { cols?: number; rows?: number } } | undefined)?.size;
    if (size) await d.commands.resize(a.caller, a.id, c.commandId, { cols: Number(size.cols), rows: Number(size.rows) });
    return {};
  },
};

const FILESYSTEM: Record<string, Call> = {
  async Stat(d, a, msg) {
    return { entry: entryInfo(await d.files.stat(a.caller, a.id, absolute(msg.path, a.user))) };
  },
  async ListDir(d, a, msg) {
    const depth = Math.max(1, Number(msg.depth ?? 1) || 1);
    return { entries: (await d.files.list(a.caller, a.id, absolute(msg.path, a.user), depth)).map(entryInfo) };
  },
  async MakeDir(d, a, msg) {
    const path = absolute(msg.path, a.user);
    const there = await d.files.stat(a.caller, a.id, path).catch(() => null);
    if (there) throw new ConnectError('already_exists', `${path} exists`);
    await d.files.makeDir(a.caller, a.id, path);
    return { entry: entryInfo(await d.files.stat(a.caller, a.id, path)) };
  },
  async Remove(d, a, msg) {
    await d.files.remove(a.caller, a.id, absolute(msg.path, a.user), true);
    return {};
  },
  async Move(d, a, msg) {
    const to = absolute(msg.destination, a.user);
    await d.files.move(a.caller, a.id, absolute(msg.source, a.user), to);
    return { entry: entryInfo(await d.files.stat(a.caller, a.id, to)) };
  },
};

/** How often a watched directory is read again, and the deepest a recursive watch reads. */
const WATCH_POLL_MS = 250;
const WATCH_DEPTH = 16;

/**
 * WatchDir by reading the directory again every WATCH_POLL_MS and telling what changed: a new
 * entry is a create, one whose size or time changed a write, one gone a remove (a rename is a
 * remove and a create). Warren's agent has no file events of its own; reading keeps the sandbox
 * awake while it is watched. Names are relative to the watched directory.
 */
async function watchDir(d: RouteDeps, a: Agent, msg: Record<string, unknown>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const dir = absolute(msg.path, a.user);
  const root = await d.files.stat(a.caller, a.id, dir);
  if (root.type !== 'dir') throw new ConnectError('invalid_argument', `${dir} is not a directory`);
  const depth = msg.recursive === true ? WATCH_DEPTH : 1;
  const read = async (): Promise<Map<string, FileEntry>> =>
    new Map((await d.files.list(a.caller, a.id, dir, depth)).map((e) => [posix.relative(dir, e.path), e] as [string, FileEntry]));
  let seen = await read();
  const out = new ConnectStream(res);
  out.send({ start: {} });
  const timeout = Number(req.headers['connect-timeout-ms'] ?? 0);
  const until = timeout > 0 ? Date.now() + timeout : Infinity;
  const every = Number(req.headers['keepalive-ping-interval'] ?? 0) * 1000;
  let pinged = Date.now();
  const withEntry = msg.includeEntry === true;
  const event = (name: string, type: string, e: FileEntry | undefined): void =>
    out.send({ filesystem: { name, type, ...(withEntry && e ? { entry: entryInfo(e) } : {}) } });
  while (!out.closed) {
    await new Promise((r) => setTimeout(r, WATCH_POLL_MS));
    if (out.closed) return;
    if (Date.now() > until) return out.end(new ConnectError('deadline_exceeded', 'the watch ran its time'));
    let now: Map<string, FileEntry>;
    try {
      now = await read();
    } catch (e) {
      return out.end(e);
    }
    for (const [name, e] of now) {
      const was = seen.get(name);
      if (!was) event(name, 'EVENT_TYPE_CREATE', e);
      else if (was.mtime !== e.mtime || was.size !== e.size) event(name, 'EVENT_TYPE_WRITE', e);
      else if (was.mode !== e.mode) event(name, 'EVENT_TYPE_CHMOD', e);
    }
    for (const [name, e] of seen) if (!now.has(name)) event(name, 'EVENT_TYPE_REMOVE', e);
    seen = now;
    if (every > 0 && Date.now() - pinged >= every) {
      out.send({ keepalive: {} });
      pinged = Date.now();
    }
  }
}

FILESYSTEM.WatchDir = watchDir;

const SERVICES: Record<string, Record<string, Call>> = { 'process.Process': PROCESS, 'filesystem.Filesystem': FILESYSTEM };

/**
 * A sandbox's agent under E2B_SANDBOX_URL (`/e2b/envd/...`): `/health`, `/files` and the Connect
 * RPC services `process.Process` and `filesystem.Filesystem`. Calls carry the sandbox's access
 * token (X-Access-Token) instead of an API key; they act for the sandbox's tenant.
 */
export async function serveEnvd(d: RouteDeps, req: IncomingMessage, res: ServerResponse, path: string, url: URL): Promise<void> {
  if (path === '/health') {
    res.writeHead(204).end();
    return;
  }
  const rpc = /^\/([a-z]+\.[A-Za-z]+)\/([A-Za-z]+)$/.exec(path);
  const stream = isStreamRequest(req);
  try {
    const id = sandboxOf(req);
    checkAccessToken(d.auth.secret('e2b-envd'), id, req.headers['x-access-token'] as string | undefined);
    const rec = await d.sandboxes.record({ tenant: '-', role: 'admin', quota: {}, keyId: 'e2b-envd' }, id);
    const agent: Agent = { caller: { tenant: rec.tenant, role: 'user', quota: {}, keyId: 'e2b-envd' }, id, user: userOf(req) };
    if (path === '/files') return await files(d, agent, req, res, url);
    const call = rpc ? SERVICES[rpc[1]!]?.[rpc[2]!] : undefined;
    if (!call) throw new ConnectError('unimplemented', `${path} is not served`);
    if (req.method !== 'POST') throw new ConnectError('invalid_argument', 'Connect calls are POSTs');
    const answer = await call(d, agent, await readMessage(req), req, res);
    if (!res.headersSent) sendUnary(res, answer ?? {});
  } catch (e) {
    if (res.headersSent) return void res.destroy();
    if (path === '/files' || !rpc) {
      const err = e instanceof WarrenError ? e : new WarrenError('internal', e instanceof Error ? e.message : 'internal error');
      return sendJson(res, err.status, { code: err.status, message: err.message });
    }
    if (stream) new ConnectStream(res).end(e);
    else sendUnaryError(res, e);
  }
}

/** `GET /files?path=` reads a file; `POST /files?path=` writes one (octet-stream) or several (multipart). */
async function files(d: RouteDeps, a: Agent, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const user = url.searchParams.get('username') || a.user;
  const path = url.searchParams.get('path');
  if (req.method === 'GET') {
    const body = await d.files.read(a.caller, a.id, absolute(path, user));
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    for await (const chunk of body) res.write(chunk);
    res.end();
    return;
  }
  if (req.method !== 'POST') throw new WarrenError('invalid_argument', '/files takes GET or POST');
  const type = String(req.headers['content-type'] ?? '');
  const written: Array<{ path: string; data: Buffer }> = [];
  let raw = await readBody(req, MAX_UPLOAD);
  const encoding = String(req.headers['content-encoding'] ?? 'identity').toLowerCase();
  if (encoding === 'gzip') {
    try {
      raw = gunzipSync(raw, { maxOutputLength: MAX_UPLOAD });
    } catch {
      throw new WarrenError('invalid_argument', `the gzip body is corrupt or unpacks past ${MAX_UPLOAD} bytes`);
    }
  } else if (encoding !== 'identity') throw new WarrenError('invalid_argument', `Content-Encoding ${encoding}: gzip or none`);
  if (type.startsWith('multipart/form-data')) {
    for (const part of parseMultipart(raw, type)) {
      const target = part.filename ?? path;
      written.push({ path: absolute(target ?? undefined, user), data: part.data });
    }
  } else written.push({ path: absolute(path ?? undefined, user), data: raw });
  if (!written.length) throw new WarrenError('invalid_argument', 'no file in the upload');
  for (const w of written)
    await d.files.write(
      a.caller,
      a.id,
      w.path,
      (async function* () {
        yield w.data;
      })(),
    );
  sendJson(
    res,
    200,
    written.map((w) => ({ name: posix.basename(w.path), type: 'file', path: w.path })),
  );
}
