import { WarrenError } from '@warren/api';
import * as ch from '../init/channel.js';
import { finishCall, type AgentConnect } from '../init/call.js';
import { REPLY } from '../init/frame.js';
import { BUSYBOX } from '../init/platform.js';
import type { EdgeSandboxSpec } from './edge-spec.js';

/**
 * What one set-up request carries of a create's files, in bytes of content: the files go into it
 * in order until the next would take it past this; that one and the rest are written one by one
 * after it (W, streamed), so the request stays far below the protocol's 16 MiB frame (with 1,024
 * paths of 4 KiB, the most a create has, about 5 MiB).
 */
export const SETUP_BATCH_BYTES = 1024 * 1024;
/** The most files one set-up request carries (native/init/init.h SETUP_MAX_FILES). */
export const SETUP_BATCH_FILES = 4096;

/** The files of a create: those for the set-up request (a prefix), and those written after it. */
export function splitSetupFiles(files: ch.SetupFile[]): { batch: ch.SetupFile[]; after: ch.SetupFile[] } {
  let bytes = 0;
  let n = 0;
  for (const f of files) {
    if (n === SETUP_BATCH_FILES || bytes + f.content.length > SETUP_BATCH_BYTES) break;
    bytes += f.content.length;
    n++;
  }
  return { batch: files.slice(0, n), after: files.slice(n) };
}

const unknownUser = (user: string): WarrenError => new WarrenError('invalid_argument', `user "${user}" does not exist in the image`, { user });

/**
 * Applies a sandbox's resolv.conf (at create, when it has the node's network), user, workdir and
 * files (at create, or when a pool's sandbox is claimed): one set-up request to its init, then
 * the files too big for it one by one.
 */
/** Whether configureSandbox makes a call to the init (a resolv.conf, a user, a workdir or files to give it). */
export function setUpCalls(spec: Pick<EdgeSandboxSpec, 'user' | 'workdir'>, files: readonly unknown[], resolvConf: boolean): boolean {
  return resolvConf || !!spec.user || !!spec.workdir || files.length > 0;
}

export async function configureSandbox(
  agent: AgentConnect,
  spec: EdgeSandboxSpec,
  files: ch.SetupFile[],
  maxFileBytes: number,
  resolvConf?: Buffer,
): Promise<void> {
  const user = spec.user ?? undefined;
  const big = files.find((f) => f.content.length > maxFileBytes);
  if (big) throw new WarrenError('payload_too_large', `file is larger than ${maxFileBytes} bytes`, { path: big.path, maxBytes: maxFileBytes });
  // Nothing to set up (a bare create without the node's network, a pool's member): no call.
  if (!setUpCalls(spec, files, resolvConf !== undefined)) return;
  const { batch, after } = splitSetupFiles(files);
  const out = await ch.setUp(agent, { resolvConf, user, workdir: spec.workdir ?? undefined, files: batch });
  if (out.kind === 'unsupported') return configureOneByOne(agent, spec, files, maxFileBytes, resolvConf);
  if (out.kind === 'failed') throw out.step === 'user' && out.error.code === 'not_found' && user ? unknownUser(user) : out.error;
  for (const f of after) await ch.writeFileFrom(agent, f.path, f.content, { mode: f.mode, maxBytes: maxFileBytes, user });
}

/** Runs a platform helper as root to completion; throws with its stderr if it fails. */
async function runAsRoot(agent: AgentConnect, argv: string[]): Promise<void> {
  const { call } = await ch.startCommand(agent, { argv, env: [], user: 'root', stdin: false, timeoutMs: 60_000 });
  let stderr = '';
  const x = await finishCall(call, {}, (f) => {
    if (f.type === REPLY.stderr && stderr.length < 2048) stderr += f.payload.toString();
  });
  if (x.get('c')?.[0] !== '0') throw new WarrenError('invalid_argument', `${argv.slice(1).join(' ')}: ${stderr.trim() || 'failed'}`);
}

/**
 * The set-up as an init from before the set-up request takes it (a sandbox adopted after the
 * edge was upgraded): resolv.conf, the user checked, the workdir and each file, a call each.
 */
async function configureOneByOne(agent: AgentConnect, spec: EdgeSandboxSpec, files: ch.SetupFile[], maxFileBytes: number, resolvConf?: Buffer): Promise<void> {
  if (resolvConf) await ch.writeFileFrom(agent, '/etc/resolv.conf', resolvConf, { mode: 0o644, maxBytes: 4096 }).catch(() => undefined);
  const user = spec.user ?? undefined;
  if (user) {
    // mkdir -p of / creates nothing, but resolves the user first: an unknown one fails here.
    await ch.makeDir(agent, '/', user).catch((e: unknown) => {
      throw e instanceof WarrenError && e.code === 'not_found' ? unknownUser(user) : e;
    });
  }
  if (spec.workdir) {
    await ch.makeDir(agent, spec.workdir, user);
    // The user works there: the workdir is theirs even when the image already had it.
    if (user) await runAsRoot(agent, [BUSYBOX, 'chown', user, spec.workdir]);
  }
  for (const f of files) await ch.writeFileFrom(agent, f.path, f.content, { mode: f.mode, maxBytes: maxFileBytes, user });
}
