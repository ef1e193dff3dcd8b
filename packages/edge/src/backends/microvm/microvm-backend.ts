import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import type { LayerInfo, LayerStore } from '@warren/images';
import type { Backend, BackendCreateSpec, BackendSandbox, SandboxStats } from '../backend.js';
import { AgentMux } from './agent-mux.js';
import type { GuestKit } from './guest-kit.js';
import { removeMicrovm, restoreMicrovm, saveMicrovm, startMicrovm, stopMicrovm, vmFiles, type RunningMicrovm } from './vm-process.js';
import { Qmp } from './qmp.js';

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
 * containers, reached over one virtio-serial port (AgentMux). A pause stops its CPUs at once,
 * then saves it to disk and ends its QEMU (the reclaim); a resume starts it again from there. Not
 * yet: commit, ports and the sandbox network (its sandboxes have loopback only).
 */
export class MicrovmBackend implements Backend {
  readonly name = 'microvm';
  readonly capabilities = { pause: true, commit: false, ports: false, fnWorkers: false, network: false };
  readonly accelerator: string;
  /** pid 0 and `stale` set: saved to disk, no QEMU (the streams open when it was saved). */
  private readonly vms = new Map<string, { pid: number; start: number; mux: AgentMux; stale: number[] | null }>();

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
    this.vms.set(spec.id, { pid: vm.pid, start: st?.start ?? 0, mux: vm.mux, stale: null });
    return { id: spec.id, connect: vm.mux.connect, initPid: vm.pid, initStartTime: st?.start ?? null };
  }

  async started(): Promise<void> {}

  async adopt(id: string): Promise<BackendSandbox | null> {
    const f = vmFiles(this.vmDir(id));
    const mux = new AgentMux(f.agent);
    const pid = Number((await readFile(f.pid, 'utf8').catch(() => '')).trim());
    let st = pid ? await procStat(pid) : null;
    const comm = pid ? await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '') : '';
    let running = st && comm.startsWith('qemu-system') ? pid : 0;
    if (!running && existsSync(f.state)) {
      // Saved while paused: started again from its state (the edge takes back running sandboxes).
      const vm = await restoreMicrovm(this.vmDir(id), mux, this.o.bootTimeoutMs).catch(() => null);
      if (!vm) return null;
      running = vm.pid;
      st = await procStat(vm.pid);
    } else if (running) {
      await Qmp.open(f.qmp)
        .then(async (q) => {
          await q.execute('cont').catch(() => undefined);
          q.close();
        })
        .catch(() => undefined);
    }
    if (!running || !st) return null;
    this.vms.set(id, { pid: running, start: st.start, mux, stale: null });
    return { id, connect: mux.connect, initPid: running, initStartTime: st.start };
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

  private entry(id: string): { pid: number; start: number; mux: AgentMux; stale: number[] | null } {
    const vm = this.vms.get(id);
    if (!vm) throw new WarrenError('not_found', `sandbox ${id} is not running here`, { id });
    return vm;
  }

  /** Stops its CPUs (QMP `stop`): answers at once; reclaim then saves it to disk. */
  async pause(id: string): Promise<void> {
    const vm = this.entry(id);
    if (vm.stale) return;
    const q = await Qmp.open(vmFiles(this.vmDir(id)).qmp);
    try {
      await q.execute('stop');
    } finally {
      q.close();
    }
  }

  /**
   * A paused microVM's memory given back whole: its state (memory and devices) saved to disk
   * and its QEMU ended; 0 bytes resident. A resume meanwhile (`signal`) cancels the save.
   */
  async reclaim(id: string, signal?: AbortSignal): Promise<number> {
    const vm = this.entry(id);
    if (vm.stale) return 0;
    if (!(await saveMicrovm(this.vmDir(id), vm.pid, signal))) return (await this.stats(id)).memoryBytes;
    vm.stale = vm.mux.detach();
    vm.pid = 0;
    return 0;
  }

  /** Its CPUs again (QMP `cont`), or, once saved, a new QEMU from its state. */
  async resume(id: string): Promise<void> {
    const vm = this.entry(id);
    if (vm.stale) {
      const r = await restoreMicrovm(this.vmDir(id), vm.mux, this.o.bootTimeoutMs);
      const st = await procStat(r.pid);
      vm.pid = r.pid;
      vm.start = st?.start ?? 0;
      await vm.mux.forget(vm.stale);
      vm.stale = null;
      return;
    }
    const q = await Qmp.open(vmFiles(this.vmDir(id)).qmp);
    try {
      await q.execute('cont');
    } finally {
      q.close();
    }
  }

  async commit(): Promise<LayerInfo> {
    this.refuse('commit');
  }

  /** CPU time and memory of its QEMU: what the VMM really holds (RSS), guest and device model together. */
  async stats(id: string): Promise<SandboxStats> {
    const vm = this.entry(id);
    if (vm.stale) return { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
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

  /** Whether its QEMU is gone (one saved to disk while paused has none, and lives on). */
  async exited(sb: BackendSandbox): Promise<boolean> {
    const vm = this.vms.get(sb.id);
    if (vm?.stale) return false;
    const pid = vm?.pid ?? sb.initPid;
    if (!pid) return true;
    const st = await procStat(pid);
    return !st || st.start !== (vm?.start ?? sb.initStartTime);
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
