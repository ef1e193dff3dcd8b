import { constants } from 'node:os';
import { WarrenError } from '@warren/api';
import { InitCall, failure, type AgentConnect } from '../init/call.js';
import { REPLY, REQ, decodeFields, type Fields } from '../init/frame.js';

/** One FnCall as the worker's init runs it (op F, docs/init-protocol.md). */
export interface FnCallSpec {
  language: 'python' | 'bash' | 'node';
  code: string;
  stdin?: Buffer;
  /** The whole environment, `K=V`. */
  env: string[];
  cwd: string;
  timeoutMs: number;
  /** Absolute paths, written in the call's own root before its code runs. */
  files: Array<{ path: string; content: Buffer }>;
  /** stdout and stderr together; past it the call is killed and its output truncated. */
  maxOutputBytes: number;
  /**
   * Python only: fork it from the worker's zygote (default). False execs python3 instead, for
   * what the zygote cannot give (PYTHON* variables, read once when an interpreter starts).
   */
  zygote?: boolean;
}

export interface FnCallOutcome {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  truncated: boolean;
}

const SIGNAL_NAMES = new Map<number, string>(Object.entries(constants.signals).map(([name, n]) => [n, name]));
const SIGKILL = String(constants.signals.SIGKILL);

/** The argv of a language when the code is exec'd (all but Python with a zygote). */
export function fnArgv(language: FnCallSpec['language'], code: string): string[] {
  switch (language) {
    case 'python':
      return ['python3', '-c', code];
    case 'bash':
      return ['bash', '-c', code];
    case 'node':
      return ['node', '-e', code];
  }
}

/** Runs one call on a FnCall worker's init and collects its output. */
export async function runFnCall(agent: AgentConnect, spec: FnCallSpec): Promise<FnCallOutcome> {
  const zygote = spec.language === 'python' && spec.zygote !== false;
  const fields: Fields = [['l', zygote ? 'python' : 'exec']];
  // Python's code goes to the zygote as it is; argv is what runs where no zygote can.
  if (zygote) fields.push(['C', spec.code]);
  if (spec.language !== 'python' || Buffer.byteLength(spec.code) < 120 * 1024) for (const a of fnArgv(spec.language, spec.code)) fields.push(['a', a]);
  fields.push(['c', spec.cwd], ['t', String(spec.timeoutMs)]);
  for (const e of spec.env) fields.push(['e', e]);
  if (spec.stdin?.length) fields.push(['I', spec.stdin]);
  for (const f of spec.files) fields.push(['P', f.path], ['B', f.content]);
  const call = await InitCall.open(agent, REQ.fn, fields);
  // The init kills a call at its timeout; a worker that answers nothing long after is broken.
  const guard = setTimeout(() => call.close(), spec.timeoutMs + 15_000);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let room = spec.maxOutputBytes;
  let truncated = false;
  try {
    for (;;) {
      const f = await call.next();
      if (f === null) throw new WarrenError('unavailable', 'the FnCall worker closed the connection');
      if (f.type === REPLY.stdout || f.type === REPLY.stderr) {
        const keep = f.payload.length <= room ? f.payload : f.payload.subarray(0, room);
        room -= keep.length;
        (f.type === REPLY.stdout ? out : err).push(keep);
        if (keep.length < f.payload.length && !truncated) {
          truncated = true;
          call.sendFields(REQ.signal, [['s', SIGKILL]]);
        }
      } else if (f.type === REPLY.done) {
        const d = decodeFields(f.payload);
        const code = d.get('c')?.[0];
        const sig = d.get('s')?.[0];
        return {
          stdout: Buffer.concat(out),
          stderr: Buffer.concat(err),
          exitCode: code === undefined ? null : Number(code),
          signal: sig ? (SIGNAL_NAMES.get(Number(sig)) ?? `SIG${sig}`) : null,
          timedOut: d.get('T')?.[0] === '1',
          truncated,
        };
      } else if (f.type === REPLY.failed) {
        const e = failure(f);
        // The call could not start: its request (a path, the language) is at fault, not the worker.
        throw new WarrenError(
          e.code === 'not_found' || e.code === 'permission_denied' || e.code === 'invalid_argument' ? 'invalid_argument' : e.code,
          e.message,
          e.details,
        );
      }
    }
  } finally {
    clearTimeout(guard);
    call.close();
  }
}
