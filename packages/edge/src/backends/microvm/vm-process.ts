import { execFile, spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/api';
import { simpleCall } from '../../init/call.js';
import { REQ } from '../../init/frame.js';
import { AgentMux } from './agent-mux.js';
import type { GuestKit } from './guest-kit.js';
import { microvmArgs, type VmLayer } from './qemu-args.js';

const run = promisify(execFile);

export interface MicrovmStart {
  cpus: number;
  memoryMiB: number;
  layers: VmLayer[];
  /** The writable disk's size. */
  diskMiB: number;
  accel: 'kvm' | 'tcg';
  /** The host's TSC rate (see MicrovmSpec.tscKhz; default: read from /proc/cpuinfo). */
  tscKhz?: number | null;
  /** How long the guest has to answer its first call (ms; default 30,000). */
  bootTimeoutMs?: number;
}

/** A running microVM: its QEMU's pid and the way to its init. */
export interface RunningMicrovm {
  pid: number;
  mux: AgentMux;
  dir: string;
}

/** The files of a microVM in its directory (the sockets, the console, the writable disk). */
export const vmFiles = (dir: string): { agent: string; qmp: string; console: string; pid: string; rw: string } => ({
  agent: join(dir, 'agent.sock'),
  qmp: join(dir, 'qmp.sock'),
  console: join(dir, 'console.log'),
  pid: join(dir, 'qemu.pid'),
  rw: join(dir, 'rw.ext4'),
});

/**
 * Starts a microVM in `dir` (an empty directory of its own) and waits until its init answers.
 * On any failure QEMU is killed, and the error says why with the end of the guest's console.
 */
export async function startMicrovm(dir: string, kit: GuestKit, s: MicrovmStart): Promise<RunningMicrovm> {
  const f = vmFiles(dir);
  await run('truncate', ['-s', `${s.diskMiB}M`, f.rw]);
  await run('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard', f.rw]);
  const args = microvmArgs({
    kernel: kit.kernel,
    initrd: kit.initrd,
    cpus: s.cpus,
    memoryMiB: s.memoryMiB,
    layers: s.layers,
    rwDisk: f.rw,
    agentSocket: f.agent,
    qmpSocket: f.qmp,
    consoleLog: f.console,
    pidFile: f.pid,
    accel: s.accel,
    tscKhz: s.tscKhz === undefined ? await hostTscKhz() : s.tscKhz,
  });
  // -daemonize: the command answers once QEMU is set up, its VM running in a process of its own.
  const out = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const p = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4096)));
    p.once('error', (e) => resolve({ code: -1, stderr: String(e) }));
    p.once('close', (code) => resolve({ code, stderr }));
  });
  if (out.code !== 0) throw new WarrenError('internal', `QEMU did not start the microVM: ${out.stderr.trim()}`, { exitCode: out.code });
  const pid = Number((await readFile(f.pid, 'utf8')).trim());
  const mux = new AgentMux(f.agent);
  try {
    await simpleCall(mux.connect, REQ.stat, [['p', '/']], {}, s.bootTimeoutMs ?? 30_000);
  } catch (e) {
    mux.close();
    await stopMicrovm(pid);
    const console = await readFile(f.console, 'utf8').catch(() => '');
    throw new WarrenError('unavailable', 'the microVM did not answer: its guest did not start', { console: console.slice(-2000) }, { cause: e });
  }
  return { pid, mux, dir };
}

let tscKhz: Promise<number | null> | null = null;

/** The host CPU's rate in kHz as /proc/cpuinfo says (its TSC's on a CPU with a constant TSC), read once; null if unknown. */
export function hostTscKhz(): Promise<number | null> {
  tscKhz ??= readFile('/proc/cpuinfo', 'utf8')
    .then((t) => {
      const mhz = Number(/^cpu MHz\s*:\s*([\d.]+)/m.exec(t)?.[1]);
      return mhz > 0 ? Math.round(mhz * 1000) : null;
    })
    .catch(() => null);
  return tscKhz;
}

/** Kills a microVM's QEMU and waits until it is gone (at most 5 s). */
export async function stopMicrovm(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  for (let i = 0; i < 500; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Removes a stopped microVM's directory. */
export async function removeMicrovm(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}
