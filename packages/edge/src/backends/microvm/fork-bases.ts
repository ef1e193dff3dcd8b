import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, readlink, rename, rm, statfs, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/api';
import { FORK_BASE_ID } from '../backend.js';
import { RAM_ID, type MicrovmSpec } from './qemu-args.js';
import { splitRamBlock } from './state-split.js';
import { Qmp } from './qmp.js';
import { runningQemu, saveMicrovm, shellSafe, spawnQemu, stopForMigration, stopMicrovm, vmFiles, type VmTap } from './vm-process.js';

const run = promisify(execFile);

/** The socket a base's QEMU takes its source's migration on, in the base's directory. */
const INCOMING = 'incoming.sock';

/**
 * A node's microVM fork bases: one directory each under `dir`, laid out as a template is (see
 * makeTemplate), so that its forks start as a template's clones do (cloneMicrovm): `ram` (the
 * guest's memory as it was, a file every fork maps copy-on-write), `state` (its devices),
 * `rw.ext4` (its writable disk, copied; each fork copies it again) and `vm.json`. Made in a
 * `.partial` directory renamed when whole; what a crash left `.partial` goes at the next use.
 */
export class MicrovmForkBases {
  private swept: Promise<void> | null = null;

  constructor(private readonly dir: string) {}

  private where(baseId: string): string {
    if (!FORK_BASE_ID.test(baseId)) throw new WarrenError('invalid_argument', `not a fork base id: ${baseId}`);
    return join(this.dir, baseId);
  }

  /** A base's directory; `not_found` when this node has no such base. */
  async path(baseId: string): Promise<string> {
    await (this.swept ??= this.sweep());
    const p = this.where(baseId);
    if (!existsSync(join(p, 'state'))) throw new WarrenError('not_found', `fork base ${baseId} is not on this node`, { base: baseId });
    return p;
  }

  /** Makes base `baseId` from the stopped (or saved) microVM in `source` (see freezeMicrovm). */
  async make(baseId: string, source: string, saved: boolean, timeoutMs?: number): Promise<void> {
    await (this.swept ??= this.sweep());
    const target = this.where(baseId);
    if (existsSync(target)) throw new WarrenError('conflict', `fork base ${baseId} exists`, { base: baseId });
    const partial = `${target}.partial`;
    await rm(partial, { recursive: true, force: true });
    await mkdir(partial, { recursive: true, mode: 0o700 });
    try {
      await freezeMicrovm(source, partial, saved, timeoutMs);
      await rename(partial, target);
    } catch (e) {
      await rm(partial, { recursive: true, force: true });
      if (e instanceof WarrenError) throw e;
      throw new WarrenError('internal', 'the fork base could not be made', { base: baseId }, { cause: e });
    }
  }

  /** Removes a base (no sandbox stands on it any more; running forks keep their mapping of its memory); a missing one is no error. */
  async remove(baseId: string): Promise<void> {
    if (FORK_BASE_ID.test(baseId)) await rm(join(this.dir, baseId), { recursive: true, force: true });
  }

  /** The bases on this node. */
  async list(): Promise<string[]> {
    await (this.swept ??= this.sweep());
    return (await readdir(this.dir).catch(() => [] as string[])).filter((n) => FORK_BASE_ID.test(n));
  }

  /** Removes what an earlier run of the edge left half made (its QEMU first). */
  private async sweep(): Promise<void> {
    for (const n of await readdir(this.dir).catch(() => [] as string[])) {
      if (!n.endsWith('.partial')) continue;
      const pid = await runningQemu(join(this.dir, n));
      if (pid !== null) await stopMicrovm(pid);
      await rm(join(this.dir, n), { recursive: true, force: true });
    }
  }
}

/**
 * Freezes the microVM in `source` as a fork base in `base` (an empty directory), leaving the
 * source as it was (stopped: the caller stopped its CPUs; or `saved` to its `state` file). Its
 * writable disk is copied as QEMU's `stop` left it (flushed). Its memory and devices go to a QEMU
 * of the base's own whose RAM is a shared file (on tmpfs when there is room: scratchRoom):
 * straight from the source's QEMU over a Unix socket, or from the source's saved state; that QEMU
 * then saves its devices alone to `state`, its RAM to the file `ram` (as a template's) and ends. The source's QEMU is left
 * `postmigrate` (stopped, its disks handed over): a `cont` takes them back (stopForMigration).
 */
export async function freezeMicrovm(source: string, base: string, saved: boolean, timeoutMs = 60_000): Promise<void> {
  const s = vmFiles(source);
  const b = vmFiles(base);
  const until = Date.now() + timeoutMs;
  const src = saved ? null : await Qmp.open(s.qmp);
  try {
    // Stopped again (a no-op but for the flush of its disks) and ready to be migrated.
    if (src) await stopForMigration(src);
    await run('cp', ['--sparse=always', s.rw, b.rw]);
    const spec = JSON.parse(await readFile(s.spec, 'utf8')) as MicrovmSpec;
    // Its forks replace the paths and open a tap of their own (startSpare). A source with a tap
    // has offloads on its NIC that a NIC without one lacks (its state would not load there): the
    // base's QEMU opens a tap too, for as long as it runs, by a name no sandbox's link has.
    const own: MicrovmSpec = {
      ...spec,
      rwDisk: b.rw,
      agentSocket: b.agent,
      qmpSocket: b.qmp,
      consoleSocket: b.console,
      pidFile: b.pid,
      ram: { file: b.ram, shared: true },
      tap: spec.tap ? unboundTap().name : null,
    };
    await writeFile(b.spec, JSON.stringify(own));
    if (spec.dax) return void (await freezeDax(src, s, b, until));
    // The guest's memory comes in on tmpfs if it has room, and is copied to the base's file after.
    const room = await scratchRoom(spec.memoryMiB);
    const scratch = room?.dir ?? null;
    const pid = await spawnQemu(base, scratch ? { ...own, ram: { file: scratch, shared: true } } : own, true).catch((e: unknown) => {
      room?.release();
      throw e;
    });
    try {
      const dst = await Qmp.open(b.qmp);
      try {
        await dst.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: false }] });
        if (src) {
          await dst.execute('migrate-incoming', { uri: `unix:${join(base, INCOMING)}` });
          // QEMU 7.2 caps a migration at 32 MiB/s unless told otherwise; this one stays on the node.
          await src.execute('migrate-set-parameters', { 'max-bandwidth': 2 ** 40 });
          // All of its RAM (a clone's QEMU has the capability on from its template's state).
          await src.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: false }] });
          await src.execute('migrate', { uri: `unix:${join(base, INCOMING)}` });
          await poll(src, 'query-migrate', (st) => done(st, 'freezing the microVM'), until);
        } else await dst.execute('migrate-incoming', { uri: `exec:cat ${shellSafe(s.state)}` });
        // It was stopped: it comes in stopped (`paused`), never running.
        await poll(dst, 'query-status', (st) => st.status !== 'inmigrate', until);
      } finally {
        dst.close();
      }
      await rm(join(base, INCOMING), { force: true });
      // Its devices alone (its memory is in its file), and, from tmpfs, its memory to the base's
      // file before QEMU ends (the file it made there is deleted: it goes with QEMU, even after a crash).
      const copy = scratch ? async () => void (await run('cp', ['--sparse=always', await ramFile(pid, scratch), b.ram])) : undefined;
      await saveMicrovm(base, pid, undefined, true, copy);
    } catch (e) {
      await src?.execute('migrate_cancel').catch(() => undefined);
      await stopMicrovm(pid);
      throw e;
    } finally {
      room?.release();
    }
  } finally {
    src?.close();
  }
}

/**
 * freezeMicrovm for a source whose layers are mapped into it (DAX): QEMU 7.2 leaves the layers
 * out of a migration only with `x-ignore-shared`, and then takes no pages into a shared RAM file,
 * so no QEMU of the base's own can take its memory in. The source's whole state (all of its RAM:
 * its own memory is private) goes to a file instead (a paused source's is its saved state), which
 * is split: its RAM's pages into the base's RAM file, the rest the base's state (state-split.ts).
 * Its forks then start as any base's.
 */
async function freezeDax(src: Qmp | null, s: ReturnType<typeof vmFiles>, b: ReturnType<typeof vmFiles>, until: number): Promise<void> {
  const full = src ? `${b.state}.full` : s.state;
  try {
    if (src) {
      await src.execute('migrate-set-parameters', { 'max-bandwidth': 2 ** 40 });
      await src.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
      await src.execute('migrate', { uri: `exec:cat > ${shellSafe(full)}` });
      await poll(src, 'query-migrate', (st) => done(st, 'freezing the microVM'), until);
    }
    await splitRamBlock(full, RAM_ID, `${b.state}.partial`, b.ram);
    await rename(`${b.state}.partial`, b.state);
  } catch (e) {
    await src?.execute('migrate_cancel').catch(() => undefined);
    await rm(`${b.state}.partial`, { force: true });
    throw e;
  } finally {
    if (src) await rm(full, { force: true });
  }
}

/** Where tmpfs is (the host's shared memory). */
const SHM = '/dev/shm';
/** TMPFS_MAGIC, the file system type statfs says tmpfs is. */
const TMPFS = 0x01021994;

/**
 * Tmpfs to take in a guest's memory of `memoryMiB` if it has room for twice that, else null. QEMU
 * reads every page a migration says is zero before it leaves it be, and writes the others: in a
 * file system's file each page is a fault that finds or allocates its blocks; on tmpfs, a fault
 * that takes a page (here the base's QEMU used a quarter to a third of the CPU time it used on ext4). Given a
 * directory, QEMU makes its file there and deletes it at once (it lives as long as QEMU).
 */
export async function scratchRoom(
  memoryMiB: number,
  stat: (dir: string) => Promise<{ type: number; bavail: number; bsize: number }> = statfs,
): Promise<{ dir: string; release(): void } | null> {
  const st = await stat(SHM).catch(() => null);
  const bytes = memoryMiB * 2 ** 20;
  // Freezes at once each count what the others hold of it until they end (statfs sees only what
  // their QEMUs wrote so far): together they never ask for more than it has.
  if (!st || st.type !== TMPFS || st.bavail * st.bsize - scratchHeld < 2 * bytes) return null;
  scratchHeld += bytes;
  let held = true;
  return {
    dir: SHM,
    release() {
      if (held) scratchHeld -= bytes;
      held = false;
    },
  };
}

/** Bytes of tmpfs the freezes under way on this node may still write (see scratchRoom). */
let scratchHeld = 0;

/** The (deleted) file QEMU `pid` made for its memory in directory `dir`, as a path to open. */
async function ramFile(pid: number, dir: string): Promise<string> {
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    if (target.startsWith(`${dir}/qemu_back_mem.`)) return `/proc/${pid}/fd/${fd}`;
  }
  throw new WarrenError('internal', `the fork base's QEMU has no memory file in ${dir}`);
}

/**
 * A tap bound to nothing, by a name no sandbox's link has: for a QEMU whose guest's NIC had a tap
 * (its state has offloads only a tap gives: it would not load on a NIC without one) and which has
 * no link of its own (a fork base's QEMU, a fork without a network). It goes with its QEMU.
 */
export function unboundTap(): VmTap {
  return { name: `wk${randomBytes(5).toString('hex')}`, bind: async () => undefined };
}

/** A migration's status: true once completed; throws when it failed. */
function done(st: { status?: unknown; 'error-desc'?: unknown }, what: string): boolean {
  if (st.status === 'failed' || st.status === 'cancelled') {
    const why = typeof st['error-desc'] === 'string' ? st['error-desc'] : st.status;
    throw new WarrenError('internal', `${what} failed: ${why}`);
  }
  return st.status === 'completed';
}

/** Asks `command` until `ok` says so (every 5 ms), until the deadline. */
async function poll(q: Qmp, command: string, ok: (answer: Record<string, unknown>) => boolean, until: number): Promise<void> {
  while (!ok((await q.execute(command)) as Record<string, unknown>)) {
    if (Date.now() > until) throw new WarrenError('deadline_exceeded', `the microVM's fork base was not made in time (${command})`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
