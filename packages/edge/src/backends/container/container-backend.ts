import { constants, cpus } from 'node:os';
import { chmod, chown, mkdir, readdir, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { IdMap, LayerInfo, LayerStore } from '@warren/images';
import type { Backend, BackendCreateSpec, BackendSandbox, LimitCounts, SandboxStats } from '../backend.js';
import { SubvolumeQuotas } from '../../host/qgroup.js';
import { forkBaseOf, sandboxHostname } from '../backend.js';
import type { ExitWatcher, Mounts, SandboxSpawner, Spawner } from '../../host/hostd.js';
import type { CgroupV1 } from '../../host/cgroups.js';
import { findNamespaceInit, processExited, processExitedNow, processStartTime, userNamespaceBase, waitExited } from '../../host/proc.js';
import { hello } from '../../init/channel.js';
import { unixAgent } from '../../init/call.js';
import { LayerMounts } from './layer-mounts.js';
import { IdRanges } from './id-ranges.js';
import { Semaphore } from '../../util/semaphore.js';
import { unlinkQuietly } from '../../util/unlink-quietly.js';
import { buildOciConfig, runcDeleteArgs, runcRunArgs } from './oci-config.js';
import { SANDBOX_CONTROLLERS, spawnFields, type SpawnPaths } from './spawn-spec.js';
import { ForkBases } from './fork-bases.js';

/**
 * How a sandbox's init is started. `native`: warren-hostd clones it into its namespaces itself
 * (native/spawn.c, ~3 ms of kernel work); `runc`: `runc run -d` of the same OCI config (two Go
 * programs per create, ~35 ms on a 2-core node). Both run the same config and the same init.
 */
export type ContainerRuntime = 'native' | 'runc';

/** A sandbox's init: its host pid, and its start time, which names it even after the pid is reused. */
interface InitRecord {
  pid: number;
  startTime: number;
}

export interface ContainerBackendOptions {
  dataDir: string;
  platformDir: string;
  runcPath: string;
  runcRoot: string;
  cgroupParent: string;
  /** The host id range layers are stored in; each sandbox sees them in a range of its own. */
  idMap: IdMap;
  store: LayerStore;
  mounts: Mounts;
  spawner: Spawner & SandboxSpawner;
  /** Tells when an init ends (warren-hostd); absent: the edge looks at each now and then. */
  exits?: ExitWatcher;
  cgroups: CgroupV1;
  runtime?: ContainerRuntime;
  /** native/build/warren-pageout: pages a paused sandbox's private memory out. */
  pageoutPath: string;
  /**
   * The sandboxes' directory is btrfs with quotas on (host/sandbox-disk.ts): each sandbox's dir
   * is a subvolume limited to its diskMiB.
   */
  diskQuotas?: boolean;
  /**
   * The hardening benchmark's baseline only: every sandbox in the layers' id range, no seccomp
   * filter, no masked paths (see oci-config.ts). Never on a node anyone uses.
   */
  unhardened?: boolean;
  logger?: { warn(msg: string, meta?: unknown): void };
}

/** Container sandboxes: EROFS layers + overlay, a user namespace and the rest, warren-init as PID 1. */
export class ContainerBackend implements Backend {
  readonly name = 'container';
  readonly capabilities = { pause: true, commit: true, ports: true, fnWorkers: true, network: true, fork: true };
  readonly runtime: ContainerRuntime;
  private readonly layers: LayerMounts;
  /** Fork bases: writable layers frozen as they were at a fork, beside the sandboxes' (same file system: reflinks). */
  private readonly forkBases: ForkBases;
  /** runc is CPU-bound; more parallel starts than cores only thrash. */
  private readonly starts = new Semaphore(Math.max(2, cpus().length * 2));
  /** Each sandbox's host id range (root inside is its hostStart). */
  private readonly ranges = new IdRanges();
  private readonly rangeOf = new Map<string, IdMap>();
  /** Each sandbox's init as it was started or adopted: a destroy checks it is still that process instead of looking it up again. */
  private readonly inits = new Map<string, InitRecord>();
  /** CPU quotas of sandboxes still being set up (see startNative), written at `started`. */
  private readonly pendingQuota = new Map<string, number>();
  /** How full the sandboxes' limited writable layers are (with disk quotas). */
  private readonly quotas: SubvolumeQuotas | null;

  constructor(private readonly o: ContainerBackendOptions) {
    this.layers = new LayerMounts(o.store, o.mounts, join(o.dataDir, 'mnt', 'layers'));
    this.runtime = o.runtime ?? 'native';
    this.quotas = o.diskQuotas ? new SubvolumeQuotas(join(o.dataDir, 'sandboxes')) : null;
    this.forkBases = new ForkBases(join(o.dataDir, 'sandboxes', 'fork-bases'), o.store);
  }

  /** Whether the kernel accounts swap per cgroup (memory.memsw.*), found at open. */
  private memsw = false;
  /** Whether the kernel has cpu.idle on cgroup v1 (5.15 on), found at open. */
  private cpuIdle = false;

  async open(): Promise<void> {
    this.memsw = existsSync(join(this.o.cgroups.mountRoot, 'memory', 'memory.memsw.limit_in_bytes'));
    this.cpuIdle = existsSync(join(this.o.cgroups.mountRoot, 'cpu', 'cpu.idle'));
    await Promise.all([mkdir(join(this.o.dataDir, 'sandboxes'), { recursive: true }), mkdir(this.rootMount, { recursive: true })]);
    await mkdir(this.runDir, { recursive: true, mode: 0o711 });
    await mkdir(this.maskDir, { recursive: true });
    await chmod(this.maskDir, 0o555);
    const mounts = await readFile('/proc/self/mountinfo', 'utf8');
    if (!mounts.split('\n').some((l) => l.split(' ')[4] === this.runDir)) await this.o.mounts.tmpfs(this.runDir, 'mode=0711,size=64m');
    await Promise.all([this.layers.recover(), this.forkBases.open()]);
    // A commit's view an earlier run left mounted (it stopped mid-commit).
    for (const id of await readdir(join(this.o.dataDir, 'mnt', 'commit')).catch(() => [])) {
      await this.o.mounts.umount(join(this.o.dataDir, 'mnt', 'commit', id)).catch(() => undefined);
      await rmdir(join(this.o.dataDir, 'mnt', 'commit', id)).catch(() => undefined);
    }
    // The ranges sandboxes of an earlier run hold, as the kernel has them: the uid map of each
    // live init's user namespace (which nothing inside can change; root inside can chown its
    // writable layer to anything in its range). A dead sandbox's files are removed at recovery,
    // before this node starts anything new.
    for (const id of await this.list()) {
      const init = await this.findInit(id);
      const hostStart = init ? await userNamespaceBase(init.pid) : null;
      if (hostStart === null) continue;
      this.ranges.claim(hostStart);
      this.rangeOf.set(id, { hostStart, size: this.o.idMap.size });
    }
  }

  private dir(id: string): string {
    return join(this.o.dataDir, 'sandboxes', id);
  }

  /**
   * Init sockets and logs live on a small tmpfs of Warren's own: creating a file costs
   * microseconds there, and up to a few hundred on the data dir's file system (an ext4 without
   * a journal, measured here, scans for an inode each time).
   */
  private get runDir(): string {
    return join(this.o.dataDir, 'run');
  }

  private socketPath(id: string): string {
    return join(this.runDir, `${id}.sock`);
  }

  private logPath(id: string): string {
    return join(this.runDir, `${id}.log`);
  }

  /**
   * Where the native spawner mounts every sandbox's root: one empty directory, since each mount
   * happens in the spawn's own mount namespace.
   */
  private get rootMount(): string {
    return join(this.o.dataDir, 'mnt', 'root');
  }

  /**
   * The empty directory bound read-only over every sandbox's masked directories (/proc/acpi,
   * /sys/firmware...): the host's root owns it, so no sandbox can write to it.
   */
  private get maskDir(): string {
    return join(this.o.dataDir, 'mnt', 'empty');
  }

  private cgroupPath(id: string): string {
    return `${this.o.cgroupParent}/${id}`;
  }

  /** `keep`: its init speaks protocol version 2 (one this node started does), so connections to it are kept. */
  private sandbox(id: string, init: InitRecord | null, keep: boolean): BackendSandbox {
    if (init) this.inits.set(id, init);
    return { id, connect: unixAgent(this.socketPath(id), { keep }), initPid: init?.pid ?? null, initStartTime: init?.startTime ?? null };
  }

  /**
   * A sandbox's init as this backend knew it, while that process (pid and start time) still runs;
   * else looked up as findInit does. Null when it is gone.
   */
  private async liveInit(id: string): Promise<InitRecord | null> {
    const known = this.inits.get(id);
    if (known && !processExitedNow(known.pid, known.startTime)) return known;
    return this.findInit(id);
  }

  /**
   * A sandbox's init, found from the kernel's own state whichever runtime started it: the process
   * of its cgroup that is PID 1 of its pid namespace. Null when it is gone.
   */
  private async findInit(id: string): Promise<InitRecord | null> {
    const pid = await findNamespaceInit(await this.o.cgroups.procs('pids', this.cgroupPath(id)));
    const startTime = pid === null ? null : await processStartTime(pid);
    return pid === null || startTime === null ? null : { pid, startTime };
  }

  async create(spec: BackendCreateSpec): Promise<BackendSandbox> {
    const dir = this.dir(spec.id);
    const rootfs = this.runtime === 'native' ? this.rootMount : join(dir, 'rootfs');
    let mounted = false;
    let started = false;
    const idMap = this.o.unhardened ? this.o.idMap : this.ranges.take();
    if (!idMap) throw new WarrenError('resource_exhausted', 'this node has no host id range left for another sandbox');
    this.rangeOf.set(spec.id, idMap);
    const layerMap = { from: this.o.idMap.hostStart, to: idMap.hostStart, size: idMap.size };
    try {
      let lower = await Promise.all(spec.layers.map((d) => this.layerPath(d)));
      const diskMiB = spec.resources.diskMiB;
      // A subvolume comes with its upper (the sandbox's) and work dirs, in one request.
      if (this.o.diskQuotas && diskMiB)
        await this.o.mounts.subvolume(join(this.o.dataDir, 'sandboxes'), spec.id, diskMiB * 1024, idMap.hostStart).catch(noRoomForSubvolume);
      else if (diskMiB) throw new WarrenError('invalid_argument', 'this node cannot limit a sandbox’s disk (no quotas on its sandboxes’ file system)');
      else {
        await mkdir(dir);
        await Promise.all([mkdir(join(dir, 'upper')), mkdir(join(dir, 'work'))]);
        await chown(join(dir, 'upper'), idMap.hostStart, idMap.hostStart);
      }
      if (this.runtime === 'runc') await mkdir(rootfs);
      // runc needs the root mounted on the host, over idmapped mounts of its layers on the host
      // too; the native spawner mounts both in the sandbox's own mount namespace, so the host's
      // mount table does not grow with every sandbox.
      if (this.runtime === 'runc' && layerMap.from !== layerMap.to) {
        mounted = true;
        const lowers = join(dir, 'lower');
        await mkdir(lowers);
        lower = await Promise.all(
          lower.map(async (l, i) => {
            await mkdir(join(lowers, String(i)));
            await this.o.mounts.idmap(l, join(lowers, String(i)), layerMap);
            return join(lowers, String(i));
          }),
        );
      }
      // overlay wants the top layer first.
      const overlay = { lower: lower.reverse(), upper: join(dir, 'upper'), work: join(dir, 'work'), lowerBase: this.layers.dir };
      // The network namespace was being made beside the work above.
      const netns = await spec.netns;
      if (this.runtime === 'runc') {
        await this.o.mounts.overlay(overlay.lower, overlay.upper, overlay.work, rootfs);
        mounted = true;
        if (netns) {
          await mkdir(join(rootfs, 'sys')).catch(() => undefined);
          await this.o.mounts.sysfs(netns, join(rootfs, 'sys'));
        }
      }
      const config = buildOciConfig({
        rootfs,
        platformDir: this.o.platformDir,
        cgroupsPath: this.cgroupPath(spec.id),
        idMap,
        cpu: spec.resources.cpu,
        cpuClass: spec.resources.cpuClass,
        memoryMiB: spec.resources.memoryMiB,
        pids: spec.resources.pids,
        hostname: sandboxHostname(spec.id),
        capSwap: this.memsw,
        netnsPath: netns,
        fn: spec.fn,
        fnLayers: spec.fn ? overlay.lower : undefined,
        unhardened: this.o.unhardened,
      });
      started = true;
      let init: InitRecord | null;
      let cpuQuota: number | null = null;
      if (this.runtime === 'native') {
        ({ init, cpuQuota } = await this.startNative(spec.id, config, overlay, layerMap));
      } else {
        await writeFile(join(dir, 'config.json'), JSON.stringify(config));
        await this.starts.run(() => this.startWithSocket(spec.id, dir));
        init = await this.findInit(spec.id);
      }
      // Where the kernel has v1 cpu.idle (5.15 on), a batch sandbox's cgroup is idle to its
      // siblings too, as on v2 (no runtime's config names it: written here, for both).
      if (spec.resources.cpuClass === 'batch' && this.cpuIdle) await this.o.cgroups.setCpuIdle(this.cgroupPath(spec.id), true);
      const sb = this.sandbox(spec.id, init, true);
      // The start returns once the init is exec'd; a hello proves it is up and serving (or the
      // caller's set-up call right after does).
      if (!spec.skipHello) await hello(sb.connect);
      if (cpuQuota !== null) this.pendingQuota.set(spec.id, cpuQuota);
      return sb;
    } catch (e) {
      await this.cleanup(spec.id, { started, mounted }).catch(() => undefined);
      throw e;
    }
  }

  async started(id: string): Promise<void> {
    const quota = this.pendingQuota.get(id);
    if (quota === undefined) return;
    this.pendingQuota.delete(id);
    this.o.cgroups.setCpuQuota(this.cgroupPath(id), quota);
  }

  /**
   * The native spawner (native/spawn.c through warren-hostd). The CPU quota is left out of the
   * spawn and written at `started`: the mounts, pivot_root, the init's own start (1.5–2 ms of
   * CPU here) and the edge's set-up (resolv.conf, workdir, files given at create) are the
   * platform's work, and under a small quota (cpu 0.01 is 1 ms per 100 ms) they would wait out
   * whole periods, ~100 ms each. Nothing of the sandbox's own runs before the create returns.
   */
  private async startNative(
    id: string,
    config: Record<string, unknown>,
    overlay: SpawnPaths['overlay'],
    layerMap: SpawnPaths['layerMap'],
  ): Promise<{ init: InitRecord; cpuQuota: number | null }> {
    const oci = config as unknown as Parameters<typeof spawnFields>[0];
    const fields = spawnFields(oci, {
      socket: this.socketPath(id),
      log: this.logPath(id),
      cgroupRoot: this.o.cgroups.mountRoot,
      overlay,
      layerMap,
      withoutCpuQuota: true,
      maskDir: this.maskDir,
    });
    const spawned = await this.o.spawner.spawnSandbox(fields);
    const pid = spawned.pid;
    const startTime = spawned.startTime ?? (await processStartTime(pid));
    if (startTime === null) throw new WarrenError('internal', 'the sandbox init exited as it started');
    return { init: { pid, startTime }, cpuQuota: oci.linux.resources?.cpu?.quota ?? null };
  }

  /**
   * `runc run -d` through the host helper, which binds the init socket at its host path and hands
   * the listening fd to the container as fd 3 (no path to it exists inside).
   */
  private async startWithSocket(id: string, dir: string): Promise<void> {
    const logFile = this.logPath(id);
    const status = await this.o.spawner.run(this.o.runcPath, runcRunArgs(this.o.runcRoot, id, dir), { logFile, listenSocket: this.socketPath(id) });
    if (status !== 0) {
      const tail = (await readFile(logFile, 'utf8').catch(() => '')).trim().split('\n').slice(-3).join(' | ');
      throw new WarrenError('internal', 'the container runtime failed to start the sandbox', {}, { cause: new Error(`runc exited ${status}: ${tail}`) });
    }
  }

  /**
   * A sandbox whose init is alive is taken back, even one whose init does not answer its hello
   * in time (busy, stopped): its processes and files are there, and its calls answer as the init
   * does; only a sandbox whose init is gone is not.
   */
  async adopt(id: string): Promise<BackendSandbox | null> {
    const init = await this.findInit(id);
    if (init === null) return null;
    const sb = this.sandbox(id, init, false);
    await this.o.cgroups.setFrozen(this.cgroupPath(id), false).catch(() => undefined);
    const version = await hello(sb.connect).catch((e: unknown) => this.o.logger?.warn('an adopted sandbox’s init did not answer', { id, error: String(e) }));
    // An init an earlier Warren started may not keep connections: only one that says so does.
    return Number(version) >= 2 ? this.sandbox(id, init, true) : sb;
  }

  async destroy(id: string): Promise<void> {
    this.quotas?.forget(id);
    // Only a runc bundle (it has config.json) has its root mounted on the host.
    await this.cleanup(id, { started: true, mounted: existsSync(join(this.dir(id), 'config.json')) });
  }

  /**
   * Kills whatever is still in a sandbox's cgroup once its init is gone: what its namespace's end
   * has not taken within 200 ms (a process frozen again meanwhile, one that escaped it), as runc
   * does, frozen while its pids are read and signalled (none can exit and free its pid for
   * another process meanwhile), then thawed, until the cgroup is empty or 10 s have passed: it
   * cannot be removed while anything is in it (a delete whose removal failed left a sandbox's
   * cgroups on its host).
   */
  private async killLeft(id: string): Promise<void> {
    const path = this.cgroupPath(id);
    // Usually nothing is left once the init ended (its namespace's end took the rest): one look, at once.
    if (!this.o.cgroups.procsNow('pids', path).length) return;
    const left = (): Promise<number[]> => this.o.cgroups.procs('pids', path);
    const graceEnd = Date.now() + 200;
    while ((await left()).length && Date.now() < graceEnd) await new Promise((r) => setTimeout(r, 2));
    const deadline = Date.now() + 10_000;
    while ((await left()).length && Date.now() < deadline) {
      await this.o.cgroups.setFrozen(path, true, 1000).catch(() => undefined);
      for (const pid of await left()) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* gone already */
        }
      }
      await this.o.cgroups.setFrozen(path, false).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  private async cleanup(id: string, what: { started: boolean; mounted: boolean }): Promise<void> {
    const dir = this.dir(id);
    if (what.started) {
      // A frozen process cannot die: thaw it unless it runs (its init found meanwhile), then kill
      // PID 1 of the namespace (which kills everything in it) instead of `runc delete -f`, which
      // sleeps 100 ms.
      const thawed = this.o.cgroups.freezerStateNow(this.cgroupPath(id)) === 'THAWED';
      const [, init] = await Promise.all([thawed ? undefined : this.o.cgroups.setFrozen(this.cgroupPath(id), false).catch(() => undefined), this.liveInit(id)]);
      this.inits.delete(id);
      if (init !== null) {
        const { pid, startTime } = init;
        // Checked again right before the signal (no wait between): the thaw may have taken a while,
        // and a pid that ended meanwhile may be another process's now.
        try {
          if (!processExitedNow(pid, startTime)) process.kill(pid, 'SIGKILL');
        } catch {
          /* already gone */
        }
        await waitExited(pid, startTime, 5000, this.o.exits);
      }
      await this.killLeft(id);
      if (existsSync(join(dir, 'config.json'))) {
        // A runc bundle. Its errors do not matter (the container may be gone already); its log
        // would outlive the dir.
        await this.o.spawner.run(this.o.runcPath, runcDeleteArgs(this.o.runcRoot, id), { logFile: '/dev/null' }).catch(() => undefined);
      }
      await this.o.cgroups.remove(this.cgroupPath(id), SANDBOX_CONTROLLERS);
    }
    if (what.mounted) {
      await this.o.mounts.umount(join(dir, 'rootfs')).catch(() => undefined);
      const lowers = await readdir(join(dir, 'lower')).catch(() => []);
      await Promise.all(lowers.map((n) => this.o.mounts.umount(join(dir, 'lower', n)).catch(() => undefined)));
    }
    // Unlinked at once, as is looked whether the dir is left: each asynchronous call is a trip
    // through Node's thread pool, ~0.1 ms of the event loop's time each in a burst of deletes.
    for (const f of [this.socketPath(id), this.logPath(id)]) unlinkQuietly(f);
    // A subvolume goes whole, at once; a plain directory (or what is left) the slow way.
    if (this.o.diskQuotas) await this.o.mounts.deleteSubvolume(join(this.o.dataDir, 'sandboxes'), id).catch(() => undefined);
    if (existsSync(dir)) await rm(dir, { recursive: true, force: true, maxRetries: 2 });
    this.pendingQuota.delete(id);
    // Its processes are gone and so are its files: the range may serve another sandbox.
    const range = this.rangeOf.get(id);
    if (range && !existsSync(dir)) {
      this.ranges.release(range.hostStart);
      this.rangeOf.delete(id);
    }
  }

  async pause(id: string): Promise<void> {
    await this.o.cgroups.setFrozen(this.cgroupPath(id), true);
  }

  /**
   * A paused sandbox's private memory goes out (anonymous pages to swap, when the host has
   * some), its shared pages stay (native/pageout.c says why); its page cache is reclaimed first
   * when the host needs memory (soft limit 0).
   */
  async reclaim(id: string, signal?: AbortSignal): Promise<number> {
    const p = this.cgroupPath(id);
    const pids = await this.o.cgroups.procs('pids', p);
    if (pids.length && !signal?.aborted) await this.o.spawner.run(this.o.pageoutPath, pids.map(String), { logFile: '/dev/null', signal });
    await this.o.cgroups.setSoftLimit(p, 0).catch(() => undefined);
    return this.o.cgroups.memoryBytes(p);
  }

  async pageOut(id: string, signal?: AbortSignal): Promise<number> {
    const p = this.cgroupPath(id);
    const pids = await this.o.cgroups.procs('pids', p);
    if (pids.length && !signal?.aborted) await this.o.spawner.run(this.o.pageoutPath, pids.map(String), { logFile: '/dev/null', signal });
    return this.o.cgroups.memoryBytes(p);
  }

  async resume(id: string): Promise<void> {
    await this.o.cgroups.setFrozen(this.cgroupPath(id), false);
    await this.o.cgroups.setSoftLimit(this.cgroupPath(id), null).catch(() => undefined);
  }

  async stats(id: string): Promise<SandboxStats> {
    const p = this.cgroupPath(id);
    const [memoryBytes, cpuSeconds, swapBytes] = await Promise.all([this.o.cgroups.memoryBytes(p), this.o.cgroups.cpuSeconds(p), this.o.cgroups.swapBytes(p)]);
    return { memoryBytes, cpuSeconds, swapBytes };
  }

  async totals(): Promise<SandboxStats> {
    const p = this.o.cgroupParent;
    const [memoryBytes, cpuSeconds, swapBytes] = await Promise.all([this.o.cgroups.memoryBytes(p), this.o.cgroups.cpuSeconds(p), this.o.cgroups.swapBytes(p)]);
    return { memoryBytes, cpuSeconds, swapBytes };
  }

  oomKills(id: string): Promise<number | null> {
    return this.o.cgroups.oomKills(this.cgroupPath(id));
  }

  async limitCounts(id: string): Promise<LimitCounts> {
    const p = this.cgroupPath(id);
    const [oomKills, pidsMaxHits] = await Promise.all([this.o.cgroups.oomKills(p), this.o.cgroups.pidsMaxHits(p)]);
    return { oomKills, pidsMaxHits };
  }

  async diskFull(id: string): Promise<boolean | null> {
    return this.quotas ? this.quotas.full(id) : null;
  }

  async exited(sb: BackendSandbox): Promise<boolean> {
    return sb.initPid === null ? false : processExited(sb.initPid, sb.initStartTime);
  }

  /** warren-hostd watches the init (its parent, or not: an adopted init is the host's child). */
  async watchExit(sb: BackendSandbox, onExit: () => void): Promise<boolean> {
    const { exits } = this.o;
    if (!exits || sb.initPid === null || sb.initStartTime === null) return false;
    return exits.watchExit(sb.initPid, sb.initStartTime, onExit).then(
      () => true,
      () => false,
    );
  }

  /**
   * Local layers stay mounted (a mount is cheap to keep and to share); a layer whose data comes
   * from the blob store is unmounted, so its cached chunks become evictable.
   */
  async releaseLayers(digests: string[]): Promise<void> {
    for (const d of digests) {
      const base = forkBaseOf(d);
      if (base) await this.forkBases.remove(base);
      else if (this.o.store.dataIsRemote(d)) await this.layers.unmount(d);
    }
  }

  async forgetLayers(digests: string[]): Promise<void> {
    for (const d of digests) {
      const base = forkBaseOf(d);
      await (base ? this.forkBases.remove(base) : this.layers.unmount(d));
    }
  }

  /** Where a layer entry's files are: an image layer's mount, or a fork base's directory. */
  private layerPath(entry: string): Promise<string> {
    const base = forkBaseOf(entry);
    return base ? this.forkBases.path(base) : this.layers.path(entry);
  }

  /**
   * The writable layer as it is now (the edge froze the sandbox) becomes fork base `baseId`: a
   * copy by reflinks, seen through the same idmapped view as a commit (so its files are in the
   * layers' id range and every fork stacks it as any layer). On btrfs (the default sandboxes'
   * file system) a copy shares every data extent with the source: its cost is the number of
   * files, not their bytes; elsewhere the bytes are copied.
   */
  async freeze(id: string, baseId: string): Promise<void> {
    return this.withUpperDir(id, (dir) => this.forkBases.make(baseId, dir));
  }

  baseLayer(baseId: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo> {
    return this.forkBases.layer(baseId, opts);
  }

  bases(): Promise<string[]> {
    return this.forkBases.list();
  }

  private upperDir(id: string): string {
    return join(this.dir(id), 'upper');
  }

  async commit(id: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo> {
    return this.withUpperDir(id, (dir) => this.o.store.addLayerDir(dir, opts.exclude, opts.excludeRegex));
  }

  /**
   * The writable layer's files are owned by the sandbox's range: an idmapped view shows them in
   * the range layers are stored in, so a commit makes the same layer whichever sandbox it came from.
   */
  private async withUpperDir<T>(id: string, fn: (dir: string) => Promise<T>): Promise<T> {
    const range = this.rangeOf.get(id);
    if (!range || range.hostStart === this.o.idMap.hostStart) return fn(this.upperDir(id));
    const view = join(this.o.dataDir, 'mnt', 'commit', id);
    await mkdir(view, { recursive: true });
    try {
      await this.o.mounts.idmap(this.upperDir(id), view, { from: range.hostStart, to: this.o.idMap.hostStart, size: range.size });
      try {
        return await fn(view);
      } finally {
        await this.o.mounts.umount(view);
      }
    } finally {
      await rmdir(view).catch(() => undefined);
    }
  }

  async list(): Promise<string[]> {
    return (await readdir(join(this.o.dataDir, 'sandboxes')).catch(() => [])).filter((n) => n.startsWith('sb_'));
  }

  async close(opts: { keepLayers: boolean }): Promise<void> {
    if (opts.keepLayers) return;
    await this.layers.unmountAll();
    await this.o.mounts.umount(this.runDir).catch(() => undefined);
  }
}

/**
 * A subvolume the sandboxes' file system has no room for (ENOSPC, EDQUOT) is the node being
 * full, which a caller may retry later or elsewhere: resource_exhausted, not internal.
 */
function noRoomForSubvolume(e: unknown): never {
  const errno = e instanceof WarrenError ? e.details.errno : undefined;
  if (errno === constants.errno.ENOSPC || errno === constants.errno.EDQUOT)
    throw new WarrenError(
      'resource_exhausted',
      "this node's sandboxes' disk is full: no room for another sandbox's writable layer (a deleted sandbox's space returns within the file system's next commit)",
      { errno },
      { cause: e },
    );
  throw e;
}
