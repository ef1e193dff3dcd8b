import { cpus } from 'node:os';
import { chown, mkdir, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { IdMap, LayerStore } from '@warren/images';
import type { Backend, BackendCreateSpec, BackendSandbox, SandboxStats } from '../backend.js';
import type { Mounts, Spawner } from '../../host/hostd.js';
import type { CgroupV1 } from '../../host/cgroups.js';
import { hello } from '../../init/channel.js';
import { LayerMounts } from './layer-mounts.js';
import { Semaphore } from '../../lifecycle/semaphore.js';
import { buildOciConfig, runcDeleteArgs, runcRunArgs } from './oci-config.js';
import { processExited, runcInitPid } from './runc.js';

export interface ContainerBackendOptions {
  dataDir: string;
  platformDir: string;
  runcPath: string;
  runcRoot: string;
  cgroupParent: string;
  idMap: IdMap;
  store: LayerStore;
  mounts: Mounts;
  spawner: Spawner;
  cgroups: CgroupV1;
}

/** Container sandboxes: EROFS layers + overlay, runc with a user namespace, warren-init as PID 1. */
export class ContainerBackend implements Backend {
  readonly name = 'container';
  private readonly layers: LayerMounts;
  private readonly bashByLayer = new Map<string, boolean>();
  /** runc is CPU-bound; more parallel starts than cores only thrash. */
  private readonly starts = new Semaphore(Math.max(2, cpus().length * 2));

  constructor(private readonly o: ContainerBackendOptions) {
    this.layers = new LayerMounts(o.store, o.mounts, join(o.dataDir, 'mnt', 'layers'));
  }

  async open(): Promise<void> {
    await mkdir(join(this.o.dataDir, 'sandboxes'), { recursive: true });
    await this.layers.recover();
  }

  private dir(id: string): string {
    return join(this.o.dataDir, 'sandboxes', id);
  }

  private cgroupPath(id: string): string {
    return `${this.o.cgroupParent}/${id}`;
  }

  private sandbox(id: string, hasBash: boolean, initPid: number | null): BackendSandbox {
    return { id, initSocket: join(this.dir(id), 'init.sock'), hasBash, initPid };
  }

  private async hasBash(layers: string[]): Promise<boolean> {
    for (const d of layers) {
      let b = this.bashByLayer.get(d);
      if (b === undefined) {
        b = (await this.layers.hasFile(d, 'bin/bash')) || (await this.layers.hasFile(d, 'usr/bin/bash'));
        this.bashByLayer.set(d, b);
      }
      if (b) return true;
    }
    return false;
  }

  async create(spec: BackendCreateSpec): Promise<BackendSandbox> {
    const dir = this.dir(spec.id);
    const rootfs = join(dir, 'rootfs');
    let mounted = false;
    let started = false;
    try {
      const lower = await Promise.all(spec.layers.map((d) => this.layers.path(d)));
      await mkdir(join(dir, 'upper'), { recursive: true });
      await Promise.all([mkdir(join(dir, 'work')), mkdir(rootfs)]);
      await chown(join(dir, 'upper'), this.o.idMap.hostStart, this.o.idMap.hostStart);
      // overlay wants the top layer first.
      await this.o.mounts.overlay(lower.reverse(), join(dir, 'upper'), join(dir, 'work'), rootfs);
      mounted = true;
      const config = buildOciConfig({
        rootfs,
        platformDir: this.o.platformDir,
        cgroupsPath: this.cgroupPath(spec.id),
        idMap: this.o.idMap,
        cpu: spec.resources.cpu,
        memoryMiB: spec.resources.memoryMiB,
        pids: spec.resources.pids,
      });
      await writeFile(join(dir, 'config.json'), JSON.stringify(config));
      started = true;
      await this.starts.run(() => this.startWithSocket(spec.id, dir));
      const sb = this.sandbox(spec.id, await this.hasBash(spec.layers), await runcInitPid(this.o.runcRoot, spec.id));
      // runc returns once the init is exec'd; a hello proves it is up and serving.
      await hello(sb.initSocket);
      return sb;
    } catch (e) {
      await this.cleanup(spec.id, { runc: started, mounted }).catch(() => undefined);
      throw e;
    }
  }

  /**
   * `runc run -d` through the host helper, which binds the init socket at its host path and hands
   * the listening fd to the container as fd 3 (no path to it exists inside).
   */
  private async startWithSocket(id: string, dir: string): Promise<void> {
    const logFile = join(dir, 'runc.log');
    const status = await this.o.spawner.run(this.o.runcPath, runcRunArgs(this.o.runcRoot, id, dir), { logFile, listenSocket: join(dir, 'init.sock') });
    if (status !== 0) {
      const tail = (await readFile(logFile, 'utf8').catch(() => '')).trim().split('\n').slice(-3).join(' | ');
      throw new WarrenError('internal', 'the container runtime failed to start the sandbox', {}, { cause: new Error(`runc exited ${status}: ${tail}`) });
    }
  }

  async adopt(id: string, layers: string[]): Promise<BackendSandbox | null> {
    const pid = await runcInitPid(this.o.runcRoot, id);
    if (pid === null || (await processExited(pid))) return null;
    const sb = this.sandbox(id, await this.hasBash(layers).catch(() => false), pid);
    try {
      await this.o.cgroups.setFrozen(this.cgroupPath(id), false).catch(() => undefined);
      await hello(sb.initSocket);
      return sb;
    } catch {
      return null;
    }
  }

  async destroy(id: string): Promise<void> {
    await this.cleanup(id, { runc: true, mounted: true });
  }

  private async cleanup(id: string, what: { runc: boolean; mounted: boolean }): Promise<void> {
    const dir = this.dir(id);
    if (what.runc) {
      const pid = await runcInitPid(this.o.runcRoot, id);
      if (pid !== null) {
        // A frozen process cannot die; thaw first, then kill PID 1 of the namespace (which
        // kills everything in it) instead of `runc delete -f`, which sleeps 100 ms.
        await this.o.cgroups.setFrozen(this.cgroupPath(id), false).catch(() => undefined);
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* already gone */
        }
        const deadline = Date.now() + 5000;
        while (!(await processExited(pid)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
      }
      // Its errors do not matter (the container may be gone already); its log would outlive the dir.
      await this.o.spawner.run(this.o.runcPath, runcDeleteArgs(this.o.runcRoot, id), { logFile: '/dev/null' }).catch(() => undefined);
    }
    if (what.mounted) await this.o.mounts.umount(join(dir, 'rootfs')).catch(() => undefined);
    await unlink(join(dir, 'init.sock')).catch(() => undefined);
    await rm(dir, { recursive: true, force: true, maxRetries: 2 });
  }

  async pause(id: string): Promise<void> {
    await this.o.cgroups.setFrozen(this.cgroupPath(id), true);
  }

  async resume(id: string): Promise<void> {
    await this.o.cgroups.setFrozen(this.cgroupPath(id), false);
  }

  async stats(id: string): Promise<SandboxStats> {
    const p = this.cgroupPath(id);
    const [memoryBytes, cpuSeconds] = await Promise.all([this.o.cgroups.memoryBytes(p), this.o.cgroups.cpuSeconds(p)]);
    return { memoryBytes, cpuSeconds };
  }

  async exited(sb: BackendSandbox): Promise<boolean> {
    return sb.initPid === null ? false : processExited(sb.initPid);
  }

  async list(): Promise<string[]> {
    return (await readdir(join(this.o.dataDir, 'sandboxes')).catch(() => [])).filter((n) => n.startsWith('sb_'));
  }

  async close(opts: { keepLayers: boolean }): Promise<void> {
    if (!opts.keepLayers) await this.layers.unmountAll();
  }
}
