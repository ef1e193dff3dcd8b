import { after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { copyFile, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Qmp, REPLY, decodeFields, startCommand, vmFiles, type AgentConnect, type VmLayer } from '@warren/edge';
import type { CreateOptions, Sandbox } from '@warren/sdk';
import { IMAGE_CACHE, policyOf, startTestWarren, type TestWarren } from './harness.js';

// What the microVM suites share: the guest's parts (the platform dir, busybox's layer), a node
// with one microVM sandbox, and what the host sees of a microVM's QEMU.

export const NATIVE = new URL('../../native/build', import.meta.url).pathname;
export const GUEST_CACHE = process.env.WARREN_GUEST_CACHE ?? '/var/cache/warren/guest';

/** The platform dirs the tests made: removed when the file's tests end. */
const platforms: string[] = [];
after(async () => {
  for (const d of platforms) await rm(d, { recursive: true, force: true });
});

/** A platform dir of warren-init alone (what the guest finds at /.warren). */
export async function platformOf(native: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-platform-'));
  platforms.push(dir);
  await copyFile(join(native, 'warren-init'), join(dir, 'warren-init'));
  return dir;
}

/** busybox's layer in the image cache: its EROFS file and its split-off data. */
export function busyboxLayer(): VmLayer {
  const meta = readdirSync(IMAGE_CACHE).find((f) => /^busybox\.v\d+\.erofs$/.test(f));
  assert.ok(meta, `no busybox layer in ${IMAGE_CACHE} (bash scripts/setup.sh makes it)`);
  const data = join(IMAGE_CACHE, meta.replace(/\.erofs$/, '.data'));
  return { meta: join(IMAGE_CACHE, meta), data: existsSync(data) ? data : null };
}

/** Runs a shell command through the init: stdout, stderr and the exit code. */
export async function sh(agent: AgentConnect, script: string): Promise<{ out: string; err: string; code: number }> {
  const { call } = await startCommand(agent, { argv: ['/bin/sh', '-c', script], env: [], stdin: false });
  let out = '';
  let err = '';
  try {
    for (;;) {
      const f = await call.next();
      if (!f) throw new Error('the call ended before its exit');
      if (f.type === REPLY.stdout) out += f.payload.toString();
      else if (f.type === REPLY.stderr) err += f.payload.toString();
      else if (f.type === REPLY.done) return { out, err, code: Number(decodeFields(f.payload).get('c')?.[0] ?? NaN) };
    }
  } finally {
    call.close();
  }
}

/** Whether a process runs (one that exited and waits to be reaped by the host's init does not). */
export const alive = (pid: number): boolean => {
  try {
    return !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

/**
 * A node with busybox and one microVM sandbox of 256 MiB (`extra` added to its create) for `fn`,
 * with its directory and QEMU's pid; the sandbox and the node are removed after, also on failure.
 */
export async function withMicrovm(
  extra: Partial<CreateOptions>,
  fn: (c: { t: TestWarren; sb: Sandbox; dir: string; pid: number }) => Promise<void>,
  node: { microvm?: NonNullable<Parameters<typeof startTestWarren>[0]>['microvm'] } = {},
): Promise<void> {
  const t = await startTestWarren({ images: ['busybox:latest'], microvm: node.microvm });
  try {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 256 }, ...extra });
    try {
      const dir = join(t.dataDir, 'microvm', sb.id);
      await fn({ t, sb, dir, pid: Number(await readFile(vmFiles(dir).pid, 'utf8')) });
    } finally {
      await sb.delete().catch(() => undefined);
    }
  } finally {
    await t.close();
  }
}

/** Whether every thread of QEMU `pid` is SCHED_IDLE and the process in the node's batch cgroup (a batch microVM's). */
export async function batchQemu(pid: number): Promise<boolean> {
  const threads = await readdir(`/proc/${pid}/task`);
  const policies = await Promise.all(threads.map((tid) => policyOf(Number(tid))));
  return threads.length > 1 && policies.every((p) => p === 5) && /^\d+:cpu[^:]*:.*\/warren-vm-batch$/m.test(await readFile(`/proc/${pid}/cgroup`, 'utf8'));
}

/** The QEMU of a microVM sandbox (by its pidfile) and its command line. */
export async function qemuOf(dataDir: string, id: string): Promise<{ pid: number; argv: string[] }> {
  const pid = Number(await readFile(vmFiles(join(dataDir, 'microvm', id)).pid, 'utf8'));
  return { pid, argv: (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0') };
}

/** What QEMU says of its guest through QMP (`running`, `paused`, `inmigrate`, …). */
export async function qmpStatus(socket: string): Promise<string> {
  const q = await Qmp.open(socket);
  try {
    return ((await q.execute('query-status')) as { status: string }).status;
  } finally {
    q.close();
  }
}

/** What a guest says of itself: hostname, the clock (s) and 16 random bytes. */
export async function identity(sb: Sandbox): Promise<{ hostname: string; clock: number; random: string }> {
  const r = await sb.exec('hostname; date +%s; head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"');
  const [hostname, clock, random] = r.stdout.split('\n');
  return { hostname: hostname!, clock: Number(clock), random: random! };
}
