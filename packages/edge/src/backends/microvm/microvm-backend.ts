import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { LayerInfo, LayerStore } from '@warren/images';
import type { Backend, BackendCreateSpec, BackendSandbox, SandboxStats } from '../backend.js';
import { AgentMux } from './agent-mux.js';
import type { GuestKit } from './guest-kit.js';
import { removeMicrovm, startMicrovm, stopMicrovm, vmFiles, type RunningMicrovm } from './vm-process.js';

export interface MicrovmBackendOptions {
  /** Each microVM's files go in a directory of its own below this one. */
  dir: string;
  /** Where a sandbox's layers come from (their EROFS files are the guest's read-only disks). */
  store: Pick<LayerStore, 'ensureMeta' | 'layerPath' | 'dataPath'>;
  /** The kernel and initramfs (built on first use). */
  kit: () => Promise<GuestKit>;
  accel: 'kvm' | 'tcg';
  /** The writable disk of a sandbox that asks for no size (MiB). */
  defaultDiskMiB: number;
  /** How long a guest has to answer after QEMU starts (ms). */
  bootTimeoutMs?: number;
}

/** A process's start time (clock ticks after boot, field 22 of /proc/PID/stat) and CPU seconds; null when it is gone. */
async function procStat(pid: number): Promise<{ start: number; cpuSeconds: number } | null> {
  try {
    const s = await readFile(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return { start: Number(f[19]), cpuSeconds: (Number(f[11]) + Number(f[12])) / 100 };
  } catch {
    return null;
  }
}

/**
 * Sandboxes as QEMU microVMs (`"backend": "microvm"`): the guest's kernel is the boundary. Each
 * boots Warren's initramfs, whose stage mounts the image's layers (read-only virtio disks) under
 * an overlay on a writable disk of `diskMiB` and hands over to the same warren-init as in
 * containers, reached over one virtio-serial port (AgentMux). Not yet: pause (a snapshot),
 * commit, ports and the sandbox network (its sandboxes have loopback only).
 */
export class MicrovmBackend implements Backend {
  readonly name = 'microvm';
  readonly capabilities = { pause: false, commit: false, ports: false, fnWorkers: false, network: false };
  readonly accelerator: string;
  private readonly vms = new Map<string, { pid: number; start: number; mux: AgentMux }>();

  constructor(private readonly o: MicrovmBackendOptions) {
    this.accelerator = o.accel;
  }

  private vmDir(id: string): string {
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) throw new WarrenError('invalid_argument', `bad sandbox id ${id}`);
    return join(this.o.dir, id);
  }

  async create(spec: BackendCreateSpec): Promise<BackendSandbox> {
    const dir = this.vmDir(spec.id);
    const layers = [];
    for (const digest of spec.layers) {
      if (!(await this.o.store.ensureMeta(digest))) throw new WarrenError('not_found', `layer ${digest} is not on this node and no blob store has it`);
      layers.push({ meta: this.o.store.layerPath(digest), data: this.o.store.dataPath(digest) });
    }
    await mkdir(dir, { recursive: true, mode: 0o700 });
    let vm: RunningMicrovm;
    try {
      vm = await startMicrovm(dir, await this.o.kit(), {
        cpus: spec.resources.cpu,
        memoryMiB: spec.resources.memoryMiB,
        diskMiB: spec.resources.diskMiB ?? this.o.defaultDiskMiB,
        layers,
        accel: this.o.accel,
        bootTimeoutMs: this.o.bootTimeoutMs,
      });
    } catch (e) {
      await removeMicrovm(dir);
      throw e;
    }
    const st = await procStat(vm.pid);
    this.vms.set(spec.id, { pid: vm.pid, start: st?.start ?? 0, mux: vm.mux });
    return { id: spec.id, connect: vm.mux.connect, initPid: vm.pid, initStartTime: st?.start ?? null };
  }

  async started(): Promise<void> {}

  async adopt(id: string): Promise<BackendSandbox | null> {
    const f = vmFiles(this.vmDir(id));
    const pid = Number((await readFile(f.pid, 'utf8').catch(() => '')).trim());
    const st = pid ? await procStat(pid) : null;
    const comm = pid ? await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '') : '';
    if (!st || !comm.startsWith('qemu-system')) return null;
    const mux = new AgentMux(f.agent);
    this.vms.set(id, { pid, start: st.start, mux });
    return { id, connect: mux.connect, initPid: pid, initStartTime: st.start };
  }

  async destroy(id: string): Promise<void> {
    const dir = this.vmDir(id);
    const vm = this.vms.get(id);
    this.vms.delete(id);
    vm?.mux.close();
    const pid = vm?.pid ?? Number((await readFile(vmFiles(dir).pid, 'utf8').catch(() => '')).trim());
    if (pid) {
      const comm = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '');
      if (comm.startsWith('qemu-system')) await stopMicrovm(pid);
    }
    await removeMicrovm(dir);
  }

  private refuse(what: string): never {
    throw new WarrenError('invalid_argument', `a microvm sandbox cannot ${what} yet`);
  }

  async pause(): Promise<void> {
    this.refuse('pause');
  }

  async reclaim(): Promise<number> {
    this.refuse('pause');
  }

  async resume(): Promise<void> {
    this.refuse('resume');
  }

  async commit(): Promise<LayerInfo> {
    this.refuse('commit');
  }

  /** CPU time and memory of its QEMU: what the VMM really holds (RSS), guest and device model together. */
  async stats(id: string): Promise<SandboxStats> {
    const vm = this.vms.get(id);
    if (!vm) throw new WarrenError('not_found', `sandbox ${id} is not running here`, { id });
    const st = await procStat(vm.pid);
    const statm = await readFile(`/proc/${vm.pid}/statm`, 'utf8').catch(() => '0 0');
    return { cpuSeconds: st?.cpuSeconds ?? 0, memoryBytes: Number(statm.split(' ')[1] ?? 0) * 4096, swapBytes: 0 };
  }

  async totals(): Promise<SandboxStats> {
    const sum = { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
    for (const id of this.vms.keys()) {
      const s = await this.stats(id).catch(() => null);
      if (!s) continue;
      sum.cpuSeconds += s.cpuSeconds;
      sum.memoryBytes += s.memoryBytes;
    }
    return sum;
  }

  async exited(sb: BackendSandbox): Promise<boolean> {
    if (sb.initPid === null) return true;
    const st = await procStat(sb.initPid);
    return !st || (sb.initStartTime !== null && st.start !== sb.initStartTime);
  }

  async releaseLayers(): Promise<void> {}

  async forgetLayers(): Promise<void> {}

  async list(): Promise<string[]> {
    if (!existsSync(this.o.dir)) return [];
    return (await readdir(this.o.dir, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name);
  }

  /** The microVMs run on (a restarted edge adopts them); only the connections to them close. */
  async close(): Promise<void> {
    for (const vm of this.vms.values()) vm.mux.close();
    this.vms.clear();
  }
}
