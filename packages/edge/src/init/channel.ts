import type { FileEntry } from '@warren/api';
import { WarrenError } from '@warren/api';
import { InitCall, SIMPLE_CALL_TIMEOUT_MS, failure, finishCall, simpleCall, type AgentConnect } from './call.js';
import { REPLY, REQ, decodeFields, type Fields } from './frame.js';

export interface StartParams {
  argv: string[];
  cwd?: string;
  env: string[];
  user?: string;
  stdin: boolean;
  timeoutMs?: number;
  /** On a new terminal of this size (its stdin, stdout and stderr). */
  pty?: { cols: number; rows: number };
}

/** Starts a command; resolves once it runs (with its call for output, stdin and signals). */
export async function startCommand(agent: AgentConnect, p: StartParams): Promise<{ call: InitCall; pid: number }> {
  const fields: Fields = p.argv.map((a) => ['a', a] as [string, string]);
  if (p.cwd) fields.push(['c', p.cwd]);
  for (const e of p.env) fields.push(['e', e]);
  if (p.user) fields.push(['U', p.user]);
  if (p.stdin) fields.push(['i', '1']);
  if (p.timeoutMs) fields.push(['t', String(p.timeoutMs)]);
  if (p.pty) fields.push(['P', `${p.pty.cols} ${p.pty.rows}`]);
  const call = await InitCall.open(agent, REQ.exec, fields);
  const f = await call.next().catch((e: unknown) => {
    call.close();
    throw e;
  });
  if (f?.type === REPLY.started) return { call, pid: Number(decodeFields(f.payload).get('p')?.[0] ?? 0) };
  call.close();
  if (f?.type === REPLY.failed) {
    const err = failure(f);
    throw new WarrenError(
      err.code === 'not_found' || err.code === 'permission_denied' || err.code === 'invalid_argument' ? 'invalid_argument' : err.code,
      err.message,
      err.details,
    );
  }
  throw new WarrenError('unavailable', 'the sandbox init did not start the command');
}

/**
 * Signals a running command by its pid on a connection of its own (its own connection may be held
 * behind stdin the command does not read); not_found once it has exited.
 */
export async function signalCommand(agent: AgentConnect, pid: number, signal: number): Promise<void> {
  const fields: Fields = [
    ['p', String(pid)],
    ['s', String(signal)],
  ];
  await simpleCall(agent, REQ.signalCommand, fields, { pid }, SIGNAL_TIMEOUT_MS);
}

/** How long a signal by pid may wait for its answer before the signal goes on the command's call. */
const SIGNAL_TIMEOUT_MS = 10_000;

export interface SessionParams {
  argv: string[];
  cwd?: string;
  env: string[];
  user?: string;
}

export async function newSession(agent: AgentConnect, p: SessionParams): Promise<string> {
  const fields: Fields = p.argv.map((a) => ['a', a] as [string, string]);
  if (p.cwd) fields.push(['c', p.cwd]);
  for (const e of p.env) fields.push(['e', e]);
  if (p.user) fields.push(['U', p.user]);
  const call = await InitCall.open(agent, REQ.newSession, fields);
  try {
    const f = await call.next();
    if (f?.type === REPLY.session) return decodeFields(f.payload).get('i')?.[0] ?? '';
    if (f?.type === REPLY.failed) throw failure(f);
    throw new WarrenError('unavailable', 'the sandbox init did not start the session');
  } finally {
    call.close();
  }
}

export interface SessionRunParams {
  session: string;
  script: string;
  env: string[];
  cwd?: string;
  timeoutMs?: number;
}

/**
 * Runs a script in a session. The init acknowledges with `s` once the shell has the command, so
 * a busy or ended session fails here, before any output is streamed.
 */
export async function runInSession(agent: AgentConnect, p: SessionRunParams): Promise<InitCall> {
  const fields: Fields = [
    ['i', p.session],
    ['C', p.script],
  ];
  for (const e of p.env) fields.push(['e', e]);
  if (p.cwd) fields.push(['c', p.cwd]);
  if (p.timeoutMs) fields.push(['t', String(p.timeoutMs)]);
  const call = await InitCall.open(agent, REQ.sessionRun, fields);
  const f = await call.next().catch((e: unknown) => {
    call.close();
    throw e;
  });
  if (f?.type === REPLY.started) return call;
  call.close();
  if (f?.type === REPLY.failed) {
    const err = failure(f, { sessionId: p.session });
    if (err.details.errno === 16) throw new WarrenError('conflict', 'the session is running another command', err.details);
    if (err.details.errno === 3) throw new WarrenError('not_found', 'the session has ended', err.details);
    throw err;
  }
  throw new WarrenError('unavailable', 'the sandbox init did not take the command');
}

export async function endSession(agent: AgentConnect, session: string): Promise<void> {
  await simpleCall(agent, REQ.endSession, [['i', session]], { sessionId: session });
}

function entry(f: Map<string, string[]>): FileEntry {
  const one = (k: string): string => f.get(k)?.[0] ?? '';
  const types = { f: 'file', d: 'dir', l: 'symlink', o: 'other' } as const;
  const t = one('t');
  const e: FileEntry = {
    name: one('n'),
    path: one('p'),
    type: t === 'f' || t === 'd' || t === 'l' || t === 'o' ? types[t] : 'other',
    size: Number(one('z')) || 0,
    mode: Number(one('m')) || 0,
    mtime: new Date(Number(one('T')) || 0).toISOString(),
  };
  if (f.has('k')) e.target = one('k');
  // An init from before owners and attributes were listed sends neither.
  if (f.has('u')) e.uid = Number(one('u'));
  if (f.has('g')) e.gid = Number(one('g'));
  const attrs = f.get('x');
  if (attrs) {
    e.xattrs = {};
    for (const a of attrs) {
      const nul = a.indexOf('\0');
      if (nul > 0) e.xattrs[a.slice(0, nul)] = a.slice(nul + 1);
    }
  }
  return e;
}

export async function statPath(agent: AgentConnect, path: string): Promise<FileEntry> {
  return entry(await simpleCall(agent, REQ.stat, [['p', path]], { path }));
}

/**
 * What one listing may hold: the container init refuses a walk past 100,000 entries
 * (native/init/init.h L_MAX_ENTRIES, E2BIG); an init that sends more anyway (a microVM's guest
 * writes every byte of its answer) is cut off at the same count, or at this many bytes of entries.
 */
export const MAX_LIST = { entries: 100_000, bytes: 64 * 1024 * 1024 } as const;

export async function listDir(agent: AgentConnect, path: string, depth: number): Promise<FileEntry[]> {
  const call = await InitCall.open(agent, REQ.list, [
    ['p', path],
    ['d', String(depth)],
  ]);
  const entries: FileEntry[] = [];
  let bytes = 0;
  await finishCall(call, { path }, (f) => {
    if (f.type !== REPLY.entry) return;
    bytes += f.payload.length;
    if (entries.length >= MAX_LIST.entries || bytes > MAX_LIST.bytes)
      throw new WarrenError('payload_too_large', 'too many entries', { path, errno: 7, maxEntries: MAX_LIST.entries });
    entries.push(entry(decodeFields(f.payload)));
  });
  return entries;
}

/**
 * Makes a path's extended attributes under `prefix` (in the user namespace, `user.`) exactly
 * `attrs` (full names): the others under it are removed. A symlink's own are set (none, on Linux).
 */
export async function setAttrs(agent: AgentConnect, path: string, prefix: string, attrs: Record<string, string>): Promise<void> {
  const fields: Fields = [
    ['p', path],
    ['q', prefix],
  ];
  for (const [k, v] of Object.entries(attrs)) fields.push(['x', `${k}\0${v}`]);
  await simpleCall(agent, REQ.attrs, fields, { path });
}

export async function removePath(agent: AgentConnect, path: string, recursive: boolean): Promise<void> {
  const fields: Fields = [['p', path]];
  if (recursive) fields.push(['r', '1']);
  // A recursive delete of a big tree takes a while.
  await simpleCall(agent, REQ.remove, fields, { path }, 10 * 60_000);
}

export async function makeDir(agent: AgentConnect, path: string, user?: string): Promise<void> {
  const fields: Fields = [['p', path]];
  if (user) fields.push(['U', user]);
  await simpleCall(agent, REQ.mkdir, fields, { path });
}

export async function movePath(agent: AgentConnect, from: string, to: string): Promise<void> {
  await simpleCall(
    agent,
    REQ.move,
    [
      ['p', from],
      ['q', to],
    ],
    { from, to },
  );
}

/** Streams a regular file out of the sandbox; the first chunk is awaited so errors come before any byte. */
export async function openRead(agent: AgentConnect, path: string): Promise<AsyncIterable<Buffer>> {
  const call = await InitCall.open(agent, REQ.read, [['p', path]]);
  const first = await call.next().catch((e: unknown) => {
    call.close();
    throw e;
  });
  if (first?.type === REPLY.failed) {
    call.close();
    throw failure(first, { path });
  }
  return (async function* () {
    try {
      let f = first;
      for (;;) {
        if (f === null) throw new WarrenError('unavailable', 'the file read was cut short', { path });
        if (f.type === REPLY.done) return;
        if (f.type === REPLY.failed) throw failure(f, { path });
        if (f.type === REPLY.stdout) yield f.payload;
        f = await call.next();
      }
    } finally {
      call.close();
    }
  })();
}

/** Writes a file from a byte stream; fails with payload_too_large past `maxBytes` (the file is then removed). */
export async function writeFileFrom(
  agent: AgentConnect,
  path: string,
  data: AsyncIterable<Buffer> | Buffer,
  opts: { mode?: number; maxBytes: number; user?: string },
): Promise<void> {
  const fields: Fields = [
    ['p', path],
    ['P', '1'],
  ];
  if (opts.mode !== undefined) fields.push(['m', opts.mode.toString(8)]);
  if (opts.user) fields.push(['U', opts.user]);
  const call = await InitCall.open(agent, REQ.write, fields);
  let size = 0;
  let tooBig = false;
  const pump = async (): Promise<void> => {
    const chunks = Buffer.isBuffer(data) ? [data] : data;
    try {
      for await (const chunk of chunks) {
        size += chunk.length;
        if (size > opts.maxBytes) {
          tooBig = true;
          call.close();
          return;
        }
        for (let off = 0; off < chunk.length; off += 1024 * 1024) {
          if (!call.send(REQ.data, chunk.subarray(off, off + 1024 * 1024))) await call.drain();
        }
      }
    } catch (e) {
      // A source that fails (a body cut off, a corrupt gzip) ends the call: the init's answer is not waited for.
      call.close();
      throw e;
    }
    call.send(REQ.eof);
  };
  const [pumped, done] = await Promise.allSettled([pump(), finishCall(call, { path })]);
  if (tooBig) {
    await removePath(agent, path, false).catch(() => undefined);
    throw new WarrenError('payload_too_large', `file is larger than ${opts.maxBytes} bytes`, { path, maxBytes: opts.maxBytes });
  }
  if (pumped.status === 'rejected') throw pumped.reason;
  if (done.status === 'rejected') throw done.reason;
}

/** One file of a set-up request: its bytes whole, in the request. */
export interface SetupFile {
  path: string;
  content: Buffer;
  mode?: number;
}

/** What one set-up request (`C`) applies, in this order. */
export interface SetupParams {
  /** Written to /etc/resolv.conf; the init goes on if it cannot be. */
  resolvConf?: Buffer;
  /** Checked (and the owner of what the request makes, as `U` on W and M). */
  user?: string;
  /** Made with its parents, and given to the user even when it was there. */
  workdir?: string;
  files: SetupFile[];
}

/**
 * How a set-up request ended: applied; refused, with what failed (the init's `w`: `user`,
 * `workdir` or `file`; empty for a malformed request) and the error (naming the path); or not
 * known to the init (one from before `C` closes the connection unanswered).
 */
export type SetupOutcome = { kind: 'done' } | { kind: 'failed'; step: string; error: WarrenError } | { kind: 'unsupported' };

/** Applies a sandbox's resolv.conf, user, workdir and files in one request (see SetupOutcome). */
export async function setUp(agent: AgentConnect, p: SetupParams): Promise<SetupOutcome> {
  const fields: Fields = [];
  if (p.resolvConf) fields.push(['r', p.resolvConf]);
  if (p.user) fields.push(['U', p.user]);
  if (p.workdir) fields.push(['c', p.workdir]);
  for (const f of p.files) {
    fields.push(['p', f.path]);
    if (f.mode !== undefined) fields.push(['m', f.mode.toString(8)]);
    fields.push(['B', f.content]);
  }
  const call = (await InitCall.open(agent, REQ.setup, fields)).deadline(SIMPLE_CALL_TIMEOUT_MS, 'the set-up');
  try {
    const f = await call.next();
    if (f === null) return { kind: 'unsupported' };
    if (f.type === REPLY.done) return { kind: 'done' };
    if (f.type !== REPLY.failed) throw new WarrenError('unavailable', 'the sandbox init did not answer the set-up');
    const d = decodeFields(f.payload);
    const path = d.get('p')?.[0];
    return { kind: 'failed', step: d.get('w')?.[0] ?? '', error: failure(f, path === undefined ? {} : { path }) };
  } finally {
    call.close();
  }
}

/** Checks that the init answers; resolves with its protocol version. */
export async function hello(agent: AgentConnect, timeoutMs = 5000): Promise<string> {
  const call = (await InitCall.open(agent, REQ.hello, [])).deadline(timeoutMs, 'hello');
  try {
    const f = await call.next();
    if (f?.type !== REPLY.hello) throw new WarrenError('unavailable', 'the sandbox init did not answer hello');
    return decodeFields(f.payload).get('v')?.[0] ?? '';
  } finally {
    call.close();
  }
}
