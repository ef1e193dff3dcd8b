/**
 * The warren-init protocol's frame kinds, written once: the edge's REQ and REPLY (init/frame.ts)
 * are made from them, and scripts/gen-init-protocol.mjs writes the C header the init is built
 * with (native/init/protocol.h) and the tables of docs/init-protocol.md from them
 * (protocol.test fails when those differ from what it would write).
 */

/** The protocol's version, as the init's hello answers it. */
export const PROTOCOL_VERSION = '2';
/** The largest frame either side sends: u32 length (type byte + payload), at most 16 MiB + 1. */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024 + 1;

/** One frame kind: its type byte, and the doc's words for it. */
export interface FrameKind {
  type: string;
  op?: string;
  fields?: string;
  meaning?: string;
  payload?: string;
}

/** Requests: the first frame on a connection; `op` and `fields` are the doc's columns (`→` what the init answers). */
export const REQUESTS = {
  hello: { type: 'H', op: 'hello', fields: 'none → `k` {`v` version, `p` init pid}' },
  exec: {
    type: 'E',
    op: 'exec',
    fields:
      '`a` argv (repeat, ≥1), `c` cwd, `e` `K=V` (repeat; the whole environment), `U` user (name or uid), `i` `"1"` when stdin will be sent (else stdin is `/dev/null`), `t` timeout ms (0/absent: none), `P` `"COLS ROWS"` (each 1–10,000): run it on a new pseudo-terminal of that size, its stdin, stdout and stderr all the terminal (output comes as `o` only; the end of stdin, `j`, is typed as ^D)',
  },
  signalCommand: {
    type: 'K',
    op: 'signal a command',
    fields:
      "`p` its pid (an `E` command's, as `s` answered it), `s` signal number → `x` {}, as its own `k` frame would; `f` `ESRCH` once it has exited. The edge sends a command's signals this way: a `k` frame waits behind the stdin sent before it, which a command that reads none never takes",
  },
  newSession: { type: 'N', op: 'new shell session', fields: '`a` shell argv, `c` cwd, `e` env, `U` user → `n` {`i` session id}' },
  sessionRun: {
    type: 'Q',
    op: 'run in session',
    fields:
      "`i` session id, `C` script text, `t` timeout ms, `e` extra env `K=V` (repeat, this command only), `c` cwd (a `cd` that persists) → `s` {`p` the shell's pid} as soon as the command is accepted and written to the shell, then `o`/`r` output, then `x`; a refused command (`EBUSY`, `ESRCH`, `EINVAL`) gets only `f`",
  },
  endSession: { type: 'D', op: 'end session', fields: '`i` session id → `x` {}' },
  read: { type: 'R', op: 'read file', fields: '`p` path → `o` chunks, then `x` {}' },
  write: {
    type: 'W',
    op: 'write file',
    fields: '`p` path, `m` octal mode (optional), `P` `"1"` create parents, `U` owner (optional, see below); then the client sends `i` chunks and `j` → `x` {}',
  },
  stat: { type: 'S', op: 'stat (lstat)', fields: '`p` path → `x` {entry fields}' },
  list: { type: 'L', op: 'list', fields: '`p` dir, `d` depth (≥1) → `e` {entry fields} per entry, then `x` {}' },
  remove: { type: 'X', op: 'delete', fields: '`p` path, `r` `"1"` recursive → `x` {}' },
  mkdir: { type: 'M', op: 'mkdir -p', fields: '`p` path, `U` owner (optional, see below) → `x` {}' },
  move: { type: 'V', op: 'rename', fields: '`p` from, `q` to → `x` {}' },
  attrs: {
    type: 'A',
    op: 'set attributes',
    fields:
      "`p` path, `q` a prefix under `user.` (at most 63 bytes), `x` name NUL value (repeat; every name under the prefix, at most XATTR_COUNT_MAX): the path's attributes under the prefix become exactly these (the others under it removed; every one checked before any is changed) → `x` {}",
  },
  setup: {
    type: 'C',
    op: "set up a sandbox (the edge's one call after the hello, at create and when a pool's sandbox is claimed)",
    fields:
      "`r` resolv.conf bytes (optional, at most 4 KiB), `U` user (optional, see below), `c` workdir (optional), then per file (at most 4,096): `p` path, `m` octal mode (optional), `B` its bytes; each field at most once but the files' → `x` {}, or `f` {`n` errno, `m` message, `w` what failed: `user`, `workdir` or `file`, `p` its path}. Applied in that order: resolv.conf is written to `/etc/resolv.conf` (mode 0644, parents made; an image where it cannot be keeps its own: no failure); the user is resolved as for `W` (unknown: `ENOENT` before anything else is made); the workdir is made with its parents as `M` does and then given to the user even if it was there; each file is written as `W` with `P` and `U` would (parents made and owned by the user, the file created or truncated, chowned, then its mode). A malformed request (a field out of order, over its bound, unknown) fails with `EINVAL` before anything is done. The edge keeps a request to 1 MiB of file bytes: files past that go by `W` after it",
  },
  reuse: {
    type: 'Y',
    op: 'keep the connection (from version 2)',
    fields:
      "none, and no answer: sent before a connection's first request, it keeps the connection for more: after each operation's last frame the init sends `y` and takes the next request on it, dropping what the edge still sends of the operation that ended (`i`, `j`, `k`, `w`). `N` ends the connection as without it",
  },
  fn: {
    type: 'F',
    op: 'FnCall (only in a FnCall worker)',
    fields:
      "`l` `python` (forked from the zygote) or anything else (exec'd), `C` Python code, `a` argv (repeat; the exec path, and Python's where no zygote runs), `e` `K=V` (repeat; the whole environment), `c` cwd (created when missing), `t` timeout ms, `I` stdin bytes, `P` path then `B` bytes (repeat: files written before the code runs) → `o`/`r` output, then `x` as for `E`; a call that cannot start gets only `f`",
  },
} as const satisfies Record<string, FrameKind>;
/** Frames the edge sends after its request. */
export const CLIENT_FRAMES = {
  data: { type: 'i', meaning: 'stdin bytes (exec) / file bytes (write)' },
  eof: { type: 'j', meaning: 'end of stdin / end of file' },
  signal: {
    type: 'k',
    meaning:
      "signal: fields {`s` signal number}; for exec: the command's process group and every descendant; for a session: interrupts the running command (SIGINT to the shell's group, then SIGKILL to the shell's descendants after 500 ms)",
  },
  resize: {
    type: 'w',
    meaning:
      'a terminal\'s new size (exec with `P` only): `"COLS ROWS"` as for `P`; a command without a terminal ignores it, a malformed one closes the connection',
  },
} as const satisfies Record<string, FrameKind>;
/** Frames the init sends. */
export const REPLIES = {
  started: { type: 's', meaning: 'command started', payload: 'fields {`p` pid inside the sandbox}' },
  stdout: { type: 'o', meaning: 'stdout / file bytes', payload: 'raw' },
  stderr: { type: 'r', meaning: 'stderr bytes', payload: 'raw' },
  done: {
    type: 'x',
    meaning: 'done',
    payload: 'fields; for commands {`c` exit code or absent, `s` signal number or absent, `T` `"1"` if killed by its timeout}',
  },
  failed: { type: 'f', meaning: 'failed', payload: 'fields {`n` errno, `m` message; `C` adds `w` what failed and `p` its path}; ends the operation' },
  hello: { type: 'k', meaning: 'the init answers `H`', payload: 'fields {`v` version, `p` init pid}' },
  session: { type: 'n', meaning: 'a session started (`N`)', payload: 'fields {`i` session id}' },
  entry: { type: 'e', meaning: 'one entry of a listing (`L`)', payload: 'entry fields' },
  ready: {
    type: 'y',
    meaning:
      "on a kept connection (`Y`), after an operation's last frame, in the same write (the edge reads both at once, so the connection is kept before its caller's next call can come): the next request is taken",
    payload: 'none',
  },
} as const satisfies Record<string, FrameKind>;

/** A table's names to its type bytes, each name keeping its own literal type. */
export type TypesOf<T extends Record<string, FrameKind>> = { readonly [K in keyof T]: T[K]['type'] };

/** `{ exec: { type: 'E', … } }` → `{ exec: 'E' }`. */
export function typesOf<T extends Record<string, FrameKind>>(table: T): TypesOf<T> {
  return Object.fromEntries(Object.entries(table).map(([name, k]) => [name, k.type])) as TypesOf<T>;
}

/** `signalCommand` → `SIGNAL_COMMAND`. */
const cName = (name: string): string => name.replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase();

/** native/init/protocol.h, whole: a `#define` per frame kind, the version and the frame limit. */
export function protocolHeader(): string {
  const defs = (prefix: string, table: Record<string, FrameKind>): string[] =>
    Object.entries(table).map(([name, k]) => `#define ${`${prefix}_${cName(name)}`.padEnd(24)} '${k.type}'`);
  return [
    "/* The warren-init protocol's frame kinds (docs/init-protocol.md). Generated from",
    ' * packages/edge/src/init/protocol.ts by scripts/gen-init-protocol.mjs: do not edit by hand. */',
    '#ifndef WARREN_INIT_PROTOCOL_H',
    '#define WARREN_INIT_PROTOCOL_H',
    '',
    `#define PROTO_VERSION "${PROTOCOL_VERSION}"`,
    `#define MAX_FRAME ${MAX_FRAME_BYTES}u`,
    '',
    '/* Requests: the first frame on a connection. */',
    ...defs('REQ', REQUESTS),
    '',
    '/* Frames the edge sends after its request. */',
    ...defs('CLIENT', CLIENT_FRAMES),
    '',
    '/* Frames the init sends. */',
    ...defs('REPLY', REPLIES),
    '',
    '#endif',
    '',
  ].join('\n');
}

/** Where a generated table of docs/init-protocol.md begins and ends. */
export const docMarkers = (table: string): [string, string] => [
  `<!-- ${table}: generated from packages/edge/src/init/protocol.ts by scripts/gen-init-protocol.mjs -->`,
  `<!-- end of ${table} -->`,
];

const cell = (s: string | undefined): string => s ?? '';

/** The doc's tables, by the name of their markers. */
export function protocolDocTables(): Record<string, string> {
  const rows = (table: Record<string, FrameKind>, cols: Array<keyof FrameKind>): string[] =>
    Object.values(table).map((k) => `| \`${k.type}\` | ${cols.map((c) => cell(k[c])).join(' | ')} |`);
  return {
    requests: ['| type | op | fields |', '|---|---|---|', ...rows(REQUESTS, ['op', 'fields'])].join('\n'),
    replies: ['| type | meaning | payload |', '|---|---|---|', ...rows(REPLIES, ['meaning', 'payload'])].join('\n'),
    'client frames': ['| type | meaning |', '|---|---|', ...rows(CLIENT_FRAMES, ['meaning'])].join('\n'),
  };
}

/** docs/init-protocol.md with its generated tables written anew; null when a table's markers are missing. */
export function withDocTables(doc: string): string | null {
  let out = doc;
  for (const [name, table] of Object.entries(protocolDocTables())) {
    const [begin, end] = docMarkers(name);
    const a = out.indexOf(begin);
    const b = out.indexOf(end);
    if (a < 0 || b < a) return null;
    out = `${out.slice(0, a + begin.length)}\n${table}\n${out.slice(b)}`;
  }
  return out;
}
