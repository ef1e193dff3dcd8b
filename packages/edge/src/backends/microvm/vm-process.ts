import { execFile, spawn } from 'node:child_process';
import { readFile, readlink, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { connect } from 'node:net';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/api';
import { simpleCall } from '../../init/call.js';
import { REPLY, REQ } from '../../init/frame.js';
import { startCommand } from '../../init/channel.js';
import { SHELL } from '../../init/platform.js';
import { randomBytes } from 'node:crypto';
import { AgentMux, MUX_SEED, muxHello, type MuxLink } from './agent-mux.js';
import { daxFits, type DaxRegion } from './dax-layout.js';
import type { GuestKit } from './guest-kit.js';
import { qemuArgs, withoutPit, type MicrovmSpec, type VmLayer } from './qemu-args.js';
import { Qmp } from './qmp.js';
import { pidfileProcess, processExited } from '../../host/proc.js';

const run = promisify(execFile);
/** The VMM, by the name it is started with (its argv[0], which the edge checks a pidfile's process by). */
const QEMU = 'qemu-system-x86_64';

export interface MicrovmStart {
  /** The machine (see MicrovmSpec.kind; default a microVM). */
  kind?: 'microvm' | 'vm';
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
  /** Its RAM in this file, written through (a template's: see makeTemplate); default anonymous. */
  ramFile?: string;
  /** The HELLO payload its agent's connections start with (default: hostname `sandbox`). */
  hello?: () => Buffer;
  /** See MicrovmSpec.idShift. */
  idShift?: { base: number; size: number } | null;
  /** Its network link (none: its NIC has no peer). */
  tap?: VmTap | null;
  /** Its layers mapped into the guest (see dax-layout.ts) where they fit; a microVM's only. */
  dax?: boolean;
}

/**
 * A microVM's network link: the tap its QEMU opens, by name, and what makes that tap the
 * sandbox's link once QEMU holds it (`bind`, given the name QEMU opened it by: a spare's is
 * another, renamed then). Bound again after every start of its QEMU (the tap goes with it).
 */
export interface VmTap {
  name: string;
  bind(current: string): Promise<void>;
}

/** A running microVM: its QEMU's pid and the way to its init. */
export interface RunningMicrovm {
  pid: number;
  mux: AgentMux;
  dir: string;
}

/** The files of a microVM in its directory, by name. */
const FILES = {
  agent: 'agent.sock',
  qmp: 'qmp.sock',
  console: 'console.sock',
  pid: 'qemu.pid',
  rw: 'rw.ext4',
  spec: 'vm.json',
  state: 'state',
  ram: 'ram',
} as const;

/** The files of a microVM in its directory (the sockets, the console, the writable disk, its saved state), as paths. */
export const vmFiles = (dir: string): { [K in keyof typeof FILES]: string } => ({
  agent: join(dir, FILES.agent),
  qmp: join(dir, FILES.qmp),
  console: join(dir, FILES.console),
  pid: join(dir, FILES.pid),
  rw: join(dir, FILES.rw),
  spec: join(dir, FILES.spec),
  state: join(dir, FILES.state),
  ram: join(dir, FILES.ram),
});

/** A HELLO for a guest named `hostname` (and its link), with the clock now and fresh randomness. */
export function helloFor(hostname: string, link: MuxLink | null = null): () => Buffer {
  return () => muxHello(BigInt(Date.now()) * 1_000_000n, randomBytes(MUX_SEED), hostname, link);
}

/**
 * Starts a microVM in `dir` (an empty directory of its own) and waits until its init answers.
 * On any failure QEMU is killed, and the error says why with the end of the guest's console.
 */
export async function startMicrovm(dir: string, kit: GuestKit, s: MicrovmStart): Promise<RunningMicrovm> {
  const f = vmFiles(dir);
  await run('truncate', ['-s', `${s.diskMiB}M`, f.rw]);
  await run('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard', f.rw]);
  const tscKhz = s.tscKhz === undefined ? await hostTscKhz() : s.tscKhz;
  const spec: MicrovmSpec = {
    kind: s.kind ?? 'microvm',
    kernel: kit.kernel,
    initrd: kit.initrd,
    cpus: s.cpus,
    memoryMiB: s.memoryMiB,
    layers: s.layers,
    rwDisk: f.rw,
    agentSocket: f.agent,
    qmpSocket: f.qmp,
    consoleSocket: f.console,
    pidFile: f.pid,
    accel: s.accel,
    tscKhz,
    noPit: s.kind !== 'vm' && withoutPit(s.accel, tscKhz),
    ram: s.ramFile ? { file: s.ramFile, shared: true } : null,
    idShift: s.idShift ?? null,
    tap: s.tap?.name ?? null,
    dax: s.dax && (s.kind ?? 'microvm') === 'microvm' ? await daxRegions(s.layers, s.memoryMiB) : null,
  };
  // What a restore starts the same machine with (its devices must match the saved state's).
  await writeFile(f.spec, JSON.stringify(spec));
  const pid = await spawnQemu(dir, spec, false);
  const mux = new AgentMux(f.agent, s.hello ?? helloFor('sandbox'));
  const tap = s.tap;
  const timeoutMs = s.bootTimeoutMs ?? 30_000;
  const vm = await bring(dir, pid, null, timeoutMs, mux, tap ? () => tap.bind(tap.name) : null);
  if (spec.kind === 'vm') {
    try {
      await waitBooted(vm.mux, timeoutMs);
    } catch (e) {
      mux.close();
      await stopMicrovm(pid);
      throw e;
    }
  }
  return vm;
}

/** The layers' files as DAX regions (bottom first, a layer's data after it), or null when they do not fit a guest of `memoryMiB` (daxFits). */
async function daxRegions(layers: VmLayer[], memoryMiB: number): Promise<DaxRegion[] | null> {
  const files = layers.flatMap((l) => (l.data ? [l.meta, l.data] : [l.meta]));
  const regions = await Promise.all(files.map(async (file) => ({ file, bytes: (await stat(file)).size })));
  return daxFits(memoryMiB, regions) === null ? regions : null;
}

/**
 * Waits until a full VM's own init has booted it (systemd's start-up jobs all done: its desktop
 * is up); an image whose PID 1 is not systemd counts as booted once its agent answers.
 */
async function waitBooted(mux: AgentMux, timeoutMs: number): Promise<void> {
  // systemd's own socket comes up early in its start; systemctl asks before then fail at once.
  const script = [
    'case "$(readlink /proc/1/exe)" in */systemd) ;; *) exit 0 ;; esac',
    'until [ -S /run/systemd/private ]; do sleep 0.1; done',
    'systemctl is-system-running --wait >/dev/null',
    'exit 0',
  ].join('\n');
  if (!(await runToEnd(mux, ['/bin/sh', '-c', script], timeoutMs)))
    throw new WarrenError('unavailable', `the VM did not finish booting within ${timeoutMs} ms`, { phase: 'boot' });
}

/**
 * Makes a template in `dir` (an empty directory of its own): a microVM booted as startMicrovm
 * does, with its RAM in the file `ram`, then saved to `state` with nothing but its devices (the
 * RAM is in the file) and its QEMU ended. `rw.ext4` and `vm.json` stay for its clones.
 */
export async function makeTemplate(dir: string, kit: GuestKit, s: MicrovmStart): Promise<void> {
  const vm = await startMicrovm(dir, kit, { ...s, ramFile: vmFiles(dir).ram });
  // The shell that runs commands, run once: its pages are in the guest's page cache of every clone.
  await warmShell(vm.mux).catch(() => undefined);
  vm.mux.close();
  try {
    await saveMicrovm(dir, vm.pid, undefined, true);
  } catch (e) {
    await stopMicrovm(vm.pid);
    throw e;
  }
}

/** Runs `true` in a guest as a command runs it (the platform's shell), to its end (at most 10 s). */
async function warmShell(mux: AgentMux): Promise<void> {
  await runToEnd(mux, [SHELL, '-c', 'true'], 10_000);
}

/** Runs `argv` in a guest to its end, at most `timeoutMs`: whether it ended in time. */
async function runToEnd(mux: AgentMux, argv: string[], timeoutMs: number): Promise<boolean> {
  const { call } = await startCommand(mux.connect, { argv, env: [], stdin: false });
  const timer = setTimeout(() => call.close(), timeoutMs);
  try {
    let f = await call.next();
    while (f && f.type !== REPLY.done) f = await call.next();
    return f !== null;
  } finally {
    clearTimeout(timer);
    call.close();
  }
}

/**
 * Starts a microVM in `dir` as a clone of the template in `template` (see makeTemplate): its
 * writable disk a copy of the template's (sparse), its RAM the template's file mapped
 * copy-on-write, its devices from the template's state. Waits until its init answers through
 * `mux`, whose HELLO gives it its own clock, randomness and hostname. Its own `vm.json` names
 * anonymous RAM: a save of it holds all of its memory, so it never needs the template again.
 */
export async function cloneMicrovm(dir: string, template: string, mux: AgentMux, tap: VmTap | null, timeoutMs = 30_000): Promise<RunningMicrovm> {
  const spare = { pid: await startSpare(dir, template, tap?.name ?? null), tap: tap?.name ?? null, running: false };
  return runSpare(dir, spare, template, mux, tap, timeoutMs);
}

/**
 * The first half of a clone (see cloneMicrovm): its disk and a QEMU started in `dir`, waiting
 * for the template's state (no CPU used meanwhile). Answers QEMU's pid. QEMU names its files by
 * their paths (it opens the disk again while saving): `dir` stays where it is, a sandbox made of
 * it is a symbolic link to it.
 */
export async function startSpare(dir: string, template: string, tap: string | null): Promise<number> {
  const t = vmFiles(template);
  const f = vmFiles(dir);
  const own: MicrovmSpec = {
    ...(JSON.parse(await readFile(t.spec, 'utf8')) as MicrovmSpec),
    rwDisk: f.rw,
    agentSocket: f.agent,
    qmpSocket: f.qmp,
    consoleSocket: f.console,
    pidFile: f.pid,
    ram: null,
    tap,
  };
  await run('cp', ['--sparse=always', t.rw, f.rw]);
  await writeFile(f.spec, JSON.stringify(own));
  return spawnQemu(dir, { ...own, ram: { file: t.ram, shared: false } }, true);
}

/**
 * Makes the spare QEMU `pid` in `dir` (see startSpare) run the template's state ahead of any
 * create, and runs one shell command in it, so that a create only gives it its link and its
 * HELLO. Under TCG each QEMU translates the guest's code anew: the command leaves the paths a
 * first command takes (the agent's stat, fork, exec, the shell) translated. The guest meanwhile
 * has the template's hostname and no link; the sandbox's HELLO replaces the clock, randomness
 * and name. On failure QEMU is stopped.
 */
export async function runSpareAhead(dir: string, pid: number, template: string, timeoutMs = 30_000): Promise<void> {
  const mux = new AgentMux(vmFiles(dir).agent, helloFor('sandbox'));
  try {
    await load(vmFiles(dir).qmp, { state: vmFiles(template).state, ignoreShared: true }, timeoutMs);
    await simpleCall(mux.connect, REQ.stat, [['p', '/']], {}, timeoutMs);
    await warmShell(mux);
  } catch (e) {
    await stopMicrovm(pid);
    throw e;
  } finally {
    mux.close();
  }
}

/**
 * The second half of a clone: the spare in `dir` (its QEMU, and the tap it opened) gets the
 * sandbox's link `tap`, loads the template's state and runs (unless it runs already: see
 * runSpareAhead).
 */
export async function runSpare(
  dir: string,
  spare: { pid: number; tap: string | null; running: boolean },
  template: string,
  mux: AgentMux,
  tap: VmTap | null,
  timeoutMs = 30_000,
): Promise<RunningMicrovm> {
  if (tap) {
    if (!spare.tap) {
      await stopMicrovm(spare.pid);
      throw new WarrenError('internal', 'a spare microVM without a network link was given one');
    }
    // A restore opens the link by its own name.
    const f = vmFiles(dir);
    const spec = JSON.parse(await readFile(f.spec, 'utf8')) as MicrovmSpec;
    await writeFile(f.spec, JSON.stringify({ ...spec, tap: tap.name }));
  }
  const current = spare.tap;
  const incoming = spare.running ? null : { state: vmFiles(template).state, ignoreShared: true };
  return bring(dir, spare.pid, incoming, timeoutMs, mux, tap && current ? () => tap.bind(current) : null);
}

/**
 * QEMU's environment: one malloc arena (glibc makes one a thread otherwise, up to 8 a CPU, each
 * kept mapped: about 4 MiB an idle microVM here; QEMU's threads allocate little).
 */
const QEMU_ENV: NodeJS.ProcessEnv = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', MALLOC_ARENA_MAX: '1' };

/** A saved state to start from: its file, and whether its RAM is not in it (a template's). */
interface Incoming {
  state: string;
  ignoreShared: boolean;
}

/**
 * Starts QEMU for the microVM in `dir` (it daemonizes once set up; with `incoming` it then waits
 * for a state to load) and answers its pid.
 */
export async function spawnQemu(dir: string, spec: MicrovmSpec, incoming: boolean): Promise<number> {
  const out = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const p = spawn(QEMU, [...qemuArgs(spec), ...(incoming ? ['-incoming', 'defer'] : [])], { stdio: ['ignore', 'ignore', 'pipe'], env: QEMU_ENV });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4096)));
    p.once('error', (e) => resolve({ code: -1, stderr: String(e) }));
    p.once('close', (code) => resolve({ code, stderr }));
  });
  if (out.code !== 0) throw new WarrenError('internal', `QEMU did not start the microVM: ${out.stderr.trim()}`, { exitCode: out.code });
  return Number((await readFile(vmFiles(dir).pid, 'utf8')).trim());
}

/**
 * Loads `incoming` into the QEMU `pid` of the microVM in `dir` if given and runs it, and waits
 * for the guest's init to answer through `mux`. On any failure QEMU is killed, and the error
 * says why with the end of the guest's console.
 */
async function bring(
  dir: string,
  pid: number,
  incoming: Incoming | null,
  timeoutMs: number,
  mux: AgentMux,
  /** Binds its tap (VmTap): while its state loads, and before the HELLO gives the guest its address. */
  link: (() => Promise<void>) | null,
): Promise<RunningMicrovm> {
  const f = vmFiles(dir);
  const console = consoleTail(f.console);
  let phase = incoming ? 'load its saved state' : 'answer';
  const t0 = Date.now();
  const linking = link?.() ?? null;
  linking?.catch(() => undefined);
  try {
    if (incoming) await load(f.qmp, incoming, timeoutMs);
    phase = 'get its network link';
    await linking;
    phase = 'answer';
    await simpleCall(mux.connect, REQ.stat, [['p', '/']], {}, timeoutMs);
  } catch (e) {
    mux.close();
    const ended = await processExited(pid);
    await stopMicrovm(pid);
    const why = `${ended ? 'its QEMU ended' : 'no answer'} after ${Date.now() - t0} ms`;
    throw new WarrenError('unavailable', `the microVM did not ${phase}: ${why}`, { console: await console.ended(), phase }, { cause: e });
  } finally {
    console.stop();
  }
  return { pid, mux, dir };
}

/**
 * The last 2,000 characters the guest's console printed while it booted, read from QEMU's
 * socket: `stop` ends the reading; `ended` waits (at most a second) for QEMU to close it first.
 */
function consoleTail(path: string): { stop(): void; ended(): Promise<string> } {
  let tail = '';
  const socket = connect(path);
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => (tail = (tail + d).slice(-2000)));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  return {
    stop: () => socket.destroy(),
    ended: async () => {
      await Promise.race([closed, new Promise((r) => setTimeout(r, 1000))]);
      socket.destroy();
      return tail;
    },
  };
}

/** A path QEMU's `exec:` migration may name (it goes through a shell). */
export function shellSafe(path: string): string {
  if (!/^[\w./-]+$/.test(path)) throw new WarrenError('internal', `a microVM's state path may not hold shell characters: ${path}`);
  return path;
}

/**
 * Saves a stopped microVM's state (memory and devices; its devices alone with `ramInFile`, a
 * template's) to its `state` file and ends its QEMU: true when saved. `signal` (the sandbox is resuming) cancels a save under way: false, QEMU
 * left running, stopped. `beforeQuit` runs once the state is saved, while QEMU still runs.
 */
export async function saveMicrovm(dir: string, pid: number, signal?: AbortSignal, ramInFile = false, beforeQuit?: () => Promise<void>): Promise<boolean> {
  const f = vmFiles(dir);
  const partial = `${f.state}.partial`;
  const dax = await daxed(dir);
  const qmp = await Qmp.open(f.qmp);
  try {
    await stopForMigration(qmp);
    // QEMU 7.2 caps a migration at 32 MiB/s unless told otherwise; this one goes to a local file.
    await qmp.execute('migrate-set-parameters', { 'max-bandwidth': 2 ** 40 });
    // A template's RAM is its file (shared): the state holds its devices alone. A clone's QEMU
    // has the capability on from loading its template's state; its own saves hold all its RAM
    // and must say so (a load checks the capability matches). A microVM with its layers mapped
    // (DAX) saves with it on, always: its layers and reserved ranges are shared memory, left out
    // (its RAM, when not a template's file, is private: in the state all the same).
    await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: ramInFile || dax }] });
    await qmp.execute('migrate', { uri: `exec:cat > ${shellSafe(partial)}` });
    for (;;) {
      if (signal?.aborted) {
        await qmp.execute('migrate_cancel').catch(() => undefined);
        await rm(partial, { force: true });
        return false;
      }
      const st = (await qmp.execute('query-migrate')) as { status?: string; 'error-desc'?: string };
      if (st.status === 'completed') break;
      if (st.status === 'failed' || st.status === 'cancelled') throw new WarrenError('internal', `saving the microVM failed: ${st['error-desc'] ?? st.status}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    await rename(partial, f.state);
    await beforeQuit?.();
    await qmp.execute('quit').catch(() => undefined);
  } finally {
    qmp.close();
  }
  await waitGone(pid);
  return true;
}

/**
 * Stops a guest's CPUs so that QEMU may migrate it. One that QEMU migrated already (a fork base
 * was frozen from it: its QEMU is in `postmigrate`, its disks handed over) must run first, for an
 * instant: QEMU migrates no guest twice without a `cont` between (which takes its disks back).
 */
export async function stopForMigration(qmp: Qmp): Promise<void> {
  if (((await qmp.execute('query-status')) as { status?: string }).status === 'postmigrate') await qmp.execute('cont');
  await qmp.execute('stop');
}

/**
 * Loads a saved state into a QEMU started with `-incoming defer` and runs it (it was saved
 * stopped, so it comes back stopped). A state QEMU cannot load ends QEMU (the caller's call then
 * fails).
 */
async function load(qmpPath: string, incoming: Incoming, timeoutMs: number): Promise<void> {
  const qmp = await Qmp.open(qmpPath);
  try {
    if (incoming.ignoreShared) await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
    await qmp.execute('migrate-incoming', { uri: `exec:cat ${shellSafe(incoming.state)}` });
    const until = Date.now() + timeoutMs;
    for (;;) {
      const st = (await qmp.execute('query-status')) as { status?: string };
      if (st.status === 'running') break;
      if (st.status !== 'inmigrate') {
        await qmp.execute('cont');
        break;
      }
      if (Date.now() > until) throw new WarrenError('deadline_exceeded', 'the microVM did not load its saved state in time');
      await new Promise((r) => setTimeout(r, 2));
    }
  } finally {
    qmp.close();
  }
}

/**
 * Starts a saved microVM again from its state file (the same machine), reached through `mux`
 * (the same AgentMux: connections made meanwhile wait for it), then removes the state file.
 */
export async function restoreMicrovm(dir: string, mux: AgentMux, tap: VmTap | null, timeoutMs = 30_000): Promise<RunningMicrovm> {
  const f = vmFiles(dir);
  const spec = JSON.parse(await readFile(f.spec, 'utf8')) as MicrovmSpec;
  const pid = await spawnQemu(dir, spec, true);
  const current = spec.tap;
  const vm = await bring(dir, pid, { state: f.state, ignoreShared: !!spec.dax }, timeoutMs, mux, current && tap ? () => tap.bind(current) : null);
  await rm(f.state, { force: true });
  return vm;
}

/** Whether the microVM in `dir` has its layers mapped (its vm.json's `dax`): its saves and loads leave shared memory out. */
async function daxed(dir: string): Promise<boolean> {
  return !!(JSON.parse(await readFile(vmFiles(dir).spec, 'utf8')) as MicrovmSpec).dax;
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

/** The pid of the QEMU running the microVM in `dir` (by its pidfile, checked to be that QEMU); null if none. */
export function runningQemu(dir: string): Promise<number | null> {
  return pidfileProcess(vmFiles(dir).pid, QEMU);
}

/** Kills a microVM's QEMU and waits until it is gone (at most 5 s). */
export async function stopMicrovm(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  await waitGone(pid);
}

/**
 * Waits until a process is gone (at most 5 s). An exited QEMU whose parent (the host's init,
 * since it daemonized) has not reaped it yet counts as gone.
 */
async function waitGone(pid: number): Promise<void> {
  for (let i = 0; i < 500 && !(await processExited(pid)); i++) await new Promise((r) => setTimeout(r, 10));
}

/** Removes a stopped microVM's directory (and, for one made of a spare, the spare's that it links to). */
export async function removeMicrovm(dir: string): Promise<void> {
  const target = await readlink(dir).catch(() => null);
  if (target !== null) await rm(resolve(dirname(dir), target), { recursive: true, force: true });
  await rm(dir, { recursive: true, force: true });
}
