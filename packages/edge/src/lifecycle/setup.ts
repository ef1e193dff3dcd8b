import { WarrenError } from '@warren/api';
import * as ch from '../init/channel.js';
import { finishCall, type AgentConnect } from '../init/call.js';
import { REPLY } from '../init/frame.js';
import { BUSYBOX } from '../init/platform.js';
import type { EdgeSandboxSpec } from './edge-spec.js';

/** Runs a platform helper as root to completion; throws with its stderr if it fails. */
async function runAsRoot(agent: AgentConnect, argv: string[]): Promise<void> {
  const { call } = await ch.startCommand(agent, { argv, env: [], user: 'root', stdin: false, timeoutMs: 60_000 });
  let stderr = '';
  const x = await finishCall(call, {}, (f) => {
    if (f.type === REPLY.stderr && stderr.length < 2048) stderr += f.payload.toString();
  });
  if (x.get('c')?.[0] !== '0') throw new WarrenError('invalid_argument', `${argv.slice(1).join(' ')}: ${stderr.trim() || 'failed'}`);
}

/** Applies a sandbox's user, workdir and files (at create, or when a pool's sandbox is claimed). */
export async function configureSandbox(
  agent: AgentConnect,
  spec: EdgeSandboxSpec,
  files: Array<{ path: string; content: Buffer; mode?: number }>,
  maxFileBytes: number,
): Promise<void> {
  const user = spec.user ?? undefined;
  if (user) {
    // mkdir -p of / creates nothing, but resolves the user first: an unknown one fails here.
    await ch.makeDir(agent, '/', user).catch((e: unknown) => {
      throw e instanceof WarrenError && e.code === 'not_found'
        ? new WarrenError('invalid_argument', `user "${user}" does not exist in the image`, { user })
        : e;
    });
  }
  if (spec.workdir) {
    await ch.makeDir(agent, spec.workdir, user);
    // The user works there: the workdir is theirs even when the image already had it.
    if (user) await runAsRoot(agent, [BUSYBOX, 'chown', user, spec.workdir]);
  }
  for (const f of files) await ch.writeFileFrom(agent, f.path, f.content, { mode: f.mode, maxBytes: maxFileBytes, user });
}
