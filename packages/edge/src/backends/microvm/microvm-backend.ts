import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { WarrenError, memoryRequestOf, type InputEvent } from '@warren/api';
import type { LayerInfo } from '@warren/images';
import {
  forkBaseOf,
  sandboxHostname,
  type Backend,
  type BackendCapabilities,
  type BackendCreateSpec,
  type BackendSandbox,
  type SandboxStats,
  type TapLink,
} from '../backend.js';
import { AgentMux } from './agent-mux.js';
import { BATCH_FILE, LINK_FILE, endMarked, muxLink, type Vm } from './vm-entry.js';
import type { GuestKit } from './guest-kit.js';
import { MicrovmForkBases, unboundTap } from './fork-bases.js';
import { MicrovmSpares } from './spares.js';
import { MicrovmTemplates, templateName } from './templates.js';
import {
  cloneMicrovm,
  helloFor,
  makeTemplate,
  removeMicrovm,
  restoreMicrovm,
  runSpare,
  runningQemu,
  saveMicrovm,
  startMicrovm,
  stopMicrovm,
  vmFiles,
  type MicrovmStart,
  type RunningMicrovm,
  type VmTap,
} from './vm-process.js';
import { processCpuSeconds, processExited, processStartTime } from '../../host/proc.js';
import { Qmp } from './qmp.js';
import { inputStrokes } from './input-events.js';
import { sendStrokes } from './input-flow.js';
import { VM_SCREEN } from './qemu-args.js';
import { VmScreens } from './vm-screens.js';
import { IdlePager } from './idle-pageout.js';
import { enableKsm } from '../../host/ksm.js';
import type { MicrovmBackendOptions } from './microvm-options.js';

export type { MicrovmBackendOptions } from './microvm-options.js';
import { hostSwapCost, qemuMemory, type VmMemory } from './vm-memory.js';

/** How long an idle guest has to drop its caches before its page-out goes ahead all the same. */
const RECLAIM_TIMEOUT_MS = 5_000;

/**
 * Sandboxes as QEMU microVMs (`"backend": "microvm"`): the guest's kernel is the boundary. Each
 * boots Warren's initramfs, whose stage mounts the image's layers (mapped into the guest: DAX, or read-only virtio disks) under
 * an overlay on a writable disk of `diskMiB` and hands over to the same warren-init as in
 * containers, reached over one virtio-serial port (AgentMux). A create clones the template of
 * its image and size (made by the first such create): no boot, its own clock, randomness and
 * hostname from the agent's HELLO. A pause stops its CPUs at once,
 * then saves it to disk and ends its QEMU (the reclaim); a resume starts it again from there.
 * On the node's sandbox network each has a tap for its link (the host's end, named for its slot,
 * like a container's veth): its address and route come with the HELLO, and the node reaches its
 * ports there. A commit has the guest write its writable layer as a layer tar. A freeze makes a
 * stopped microVM a fork base (fork-bases.ts: its memory as a file, its devices, its disk), and
 * a create whose layers end with the base's entry starts from it as a clone starts from its
 * template: its memory the base's file mapped copy-on-write, a disk copy of its own, its own
 * tap, and its own clock, randomness, hostname and address from the agent's HELLO.
 */
export class MicrovmBackend implements Backend {
  readonly name: 'microvm' | 'vm';
  readonly capabilities: BackendCapabilities;
  readonly link = 'tap' as const;
  readonly accelerator: string;
  private readonly vms = new Map<string, Vm>();
  private readonly templates: MicrovmTemplates | null;
  private readonly spares: MicrovmSpares | null;
  private readonly forkBases: MicrovmForkBases;
  /** See heldBeyondRequestsMiB. */
  private beyond = 0;
  /** Each running microVM's memory request (MiB; absent after an adopt: the default share of its guest's memory). */
  private readonly requests = new Map<string, number>();
  private readonly pager: IdlePager | null;
  private ksm: Promise<{ close(): Promise<void> } | null> | null = null;
  private readonly screens = new VmScreens({ dump: (id, file) => this.qmp(id, 'screendump', { filename: file }) });

  constructor(private readonly o: MicrovmBackendOptions) {
    this.name = o.kind ?? 'microvm';
    this.accelerator = o.accel;
    // On the sandbox network the node reaches its ports at its address, over its tap.
    const linked = o.bindTap !== undefined;
    // Forks of full VMs would take the same path, untried so far: microVMs only.
    const fork = this.name === 'microvm';
    this.capabilities = { pause: true, commit: true, ports: linked, fnWorkers: false, network: linked, display: this.name === 'vm', fork };
    // A dot keeps it out of list() (its entries are sandboxes) and out of the spares' sweep.
    this.forkBases = new MicrovmForkBases(join(o.dir, '.fork-bases'));
    const spares = o.templateDir === null ? null : new MicrovmSpares(o.dir, o.spares ?? 1, linked);
    this.spares = spares;
    this.templates = o.templateDir === null ? null : new MicrovmTemplates(o.templateDir, 8, (t) => spares!.discard(t));
    const running = (): Array<{ id: string; pid: number }> =>
      [...this.vms].filter(([, v]) => !v.saved && !v.saving && v.pid > 0).map(([id, v]) => ({ id, pid: v.pid }));
    // A microVM's guest zeroes what it frees (init_on_free=1): asked to drop its caches first, it swaps less.
    const reclaim = this.name === 'microvm' ? (id: string): Promise<boolean> => this.dropGuestCaches(id) : undefined;
    this.pager = o.pageoutPath ? new IdlePager({ pageoutPath: o.pageoutPath, policy: o.idlePolicy, running, reclaim }) : null;
  }

  /**
   * Asks the guest of running sandbox `id` to give its caches back (AgentMux.reclaim), as the
   * idle pager does before a page-out; whether it answered within RECLAIM_TIMEOUT_MS.
   */
  async dropGuestCaches(id: string): Promise<boolean> {
    return (await this.vms.get(id)?.mux.reclaim(RECLAIM_TIMEOUT_MS)) ?? false;
  }

  private vmDir(id: string): string {
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) throw new WarrenError('invalid_argument', `bad sandbox id ${id}`);
    return join(this.o.dir, id);
  }

  async create(spec: BackendCreateSpec): Promise<BackendSandbox> {
    const link = this.o.bindTap ? (spec.tap ?? null) : null;
    const top = spec.layers.at(-1);
    const base = top === undefined ? null : forkBaseOf(top);
    const layers = [];
    // A fork of a fork names its parents' bases too: only the top one matters to a VM (its disk
    // and memory are whole); the image layers under them are the VM's drives.
    for (const digest of spec.layers.filter((l) => forkBaseOf(l) === null)) {
      if (!(await this.o.store.ensureMeta(digest))) throw new WarrenError('not_found', `layer ${digest} is not on this node and no blob store has it`);
      layers.push({ meta: this.o.store.layerPath(digest), data: this.o.store.dataPath(digest) });
    }
    const batch = spec.resources.cpuClass === 'batch';
    this.requests.set(spec.id, memoryRequestOf(spec.resources));
    if (batch && !this.o.batchProcess) throw new WarrenError('invalid_argument', `this node cannot run ${this.name} sandboxes of the batch CPU class`);
    if (base) return this.fork(spec, base, link, batch);
    const kit = await this.o.kit();
    const boot: MicrovmStart = {
      kind: this.name,
      cpus: Math.max(1, Math.ceil(spec.resources.cpu)),
      memoryMiB: spec.resources.memoryMiB,
      diskMiB: spec.resources.diskMiB ?? this.o.defaultDiskMiB,
      layers,
      accel: this.o.accel,
      bootTimeoutMs: this.o.bootTimeoutMs,
      hello: helloFor(sandboxHostname(spec.id), muxLink(link)),
      idShift: this.o.idShift ?? null,
      tap: this.vmTap(link),
      dax: this.name === 'microvm' && !!this.o.daxLayers,
    };
    return this.launch(spec.id, link, boot.memoryMiB, batch, (dir) =>
      this.templates ? this.clone(this.templates, dir, kit, boot) : startMicrovm(dir, kit, boot),
    );
  }

  /**
   * A fork of base `baseId` (see MicrovmForkBases): started as a clone of the base (cloneMicrovm),
   * the guest runs on from where its source was frozen, told who and when it now is by the HELLO.
   * Its machine is the base's: a create that asks for other memory is refused.
   */
  private async fork(spec: BackendCreateSpec, baseId: string, link: TapLink | null, batch: boolean): Promise<BackendSandbox> {
    const base = await this.forkBases.path(baseId);
    const { memoryMiB, tap } = JSON.parse(await readFile(vmFiles(base).spec, 'utf8')) as { memoryMiB: number; tap?: string | null };
    if (memoryMiB !== spec.resources.memoryMiB)
      throw new WarrenError('invalid_argument', `a fork of base ${baseId} has its memory: ${memoryMiB} MiB, not ${spec.resources.memoryMiB}`, { base: baseId });
    // Without a link of its own, a fork of a guest that had one keeps its address on a tap that goes nowhere.
    const own = this.vmTap(link) ?? (tap ? unboundTap() : null);
    return this.launch(spec.id, link, memoryMiB, batch, (dir) =>
      cloneMicrovm(dir, base, new AgentMux(vmFiles(dir).agent, helloFor(sandboxHostname(spec.id), muxLink(link))), own, this.o.bootTimeoutMs),
    );
  }

  /** Runs `start` in sandbox `id`'s new directory and keeps what it started; on failure nothing is left. */
  private async launch(
    id: string,
    link: TapLink | null,
    memoryMiB: number,
    batch: boolean,
    start: (dir: string) => Promise<RunningMicrovm>,
  ): Promise<BackendSandbox> {
    const dir = this.vmDir(id);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    let vm: RunningMicrovm | null = null;
    try {
      vm = await start(dir);
      // What an adopt, or a restore after one, needs again (its directory may be a spare's now).
      await writeFile(join(dir, LINK_FILE), JSON.stringify(link));
      if (batch) {
        await writeFile(join(dir, BATCH_FILE), '');
        await this.o.batchProcess!(vm.pid);
      }
    } catch (e) {
      if (vm) {
        vm.mux.close();
        await stopMicrovm(vm.pid);
      }
      await removeMicrovm(dir);
      throw e;
    }
    const startTime = await processStartTime(vm.pid);
    this.vms.set(id, { pid: vm.pid, start: startTime, mux: vm.mux, saved: false, saving: null, memoryMiB, link });
    return { id, connect: vm.mux.connect, initPid: vm.pid, initStartTime: startTime };
  }

  /** How a microVM's QEMU's tap becomes its sandbox's link `link` (none without one, or without a sandbox network). */
  private vmTap(link: TapLink | null): VmTap | null {
    const bind = this.o.bindTap;
    return link && bind ? { name: link.ifname, bind: (current) => bind(current, link) } : null;
  }

  /** A clone of the template for `boot` (made first if this node has none); a clone that fails drops it. */
  private clone(templates: MicrovmTemplates, dir: string, kit: GuestKit, boot: MicrovmStart): Promise<RunningMicrovm> {
    const name = templateName({
      kernel: kit.kernel,
      initrd: kit.initrd,
      layers: boot.layers,
      cpus: boot.cpus,
      memoryMiB: boot.memoryMiB,
      diskMiB: boot.diskMiB,
      accel: boot.accel,
      dax: boot.dax,
    });
    return templates.with(
      name,
      (t) => makeTemplate(t, kit, { ...boot, hello: undefined, tap: null }),
      async (t) => {
        const mux = new AgentMux(vmFiles(dir).agent, boot.hello!);
        try {
          const spare = await this.spares?.take(t);
          let vm: RunningMicrovm;
          if (spare) {
            // The sandbox's directory is a link to the spare's (QEMU keeps the paths it was started with).
            await rm(dir, { recursive: true, force: true });
            await symlink(basename(spare.dir), dir);
            vm = await runSpare(dir, spare, t, mux, boot.tap ?? null, this.o.bootTimeoutMs);
          } else vm = await cloneMicrovm(dir, t, mux, boot.tap ?? null, this.o.bootTimeoutMs);
          this.spares?.fill(t);
          return vm;
        } catch (e) {
          await templates.drop(name);
          throw e;
        }
      },
    );
  }

  /** The first sandbox started: the idle pager begins to look, and KSM is turned on (until close). */
  async started(): Promise<void> {
    this.pager?.start();
    if (this.o.ksm) this.ksm ??= enableKsm(this.o.ksm);
  }

  async adopt(id: string): Promise<BackendSandbox | null> {
    const dir = this.vmDir(id);
    const link = this.o.bindTap ? ((JSON.parse(await readFile(join(dir, LINK_FILE), 'utf8').catch(() => 'null')) as TapLink | null) ?? null) : null;
    const mux = new AgentMux(vmFiles(dir).agent, helloFor(sandboxHostname(id), muxLink(link)));
    let pid = await runningQemu(dir);
    if (pid === null && existsSync(vmFiles(dir).state)) {
      // Saved while paused: started again from its state (the edge takes back running sandboxes).
      pid = (await restoreMicrovm(dir, mux, this.vmTap(link), this.o.bootTimeoutMs).catch(() => null))?.pid ?? null;
      if (pid !== null) await this.batchAgain(dir, pid);
    } else if (pid !== null) {
      await Qmp.open(vmFiles(dir).qmp)
        .then(async (q) => {
          await q.execute('cont').catch(() => undefined);
          q.close();
        })
        .catch(() => undefined);
    }
    const start = pid === null ? null : await processStartTime(pid);
    if (pid === null || start === null) return null;
    const memoryMiB = (JSON.parse(await readFile(vmFiles(dir).spec, 'utf8').catch(() => '{}')) as { memoryMiB?: number }).memoryMiB ?? 0;
    this.vms.set(id, { pid, start, mux, saved: false, saving: null, memoryMiB, link });
    this.pager?.start();
    return { id, connect: mux.connect, initPid: pid, initStartTime: start };
  }

  async destroy(id: string): Promise<void> {
    const dir = this.vmDir(id);
    const vm = this.vms.get(id);
    this.vms.delete(id);
    this.requests.delete(id);
    vm?.mux.close();
    const pid = await runningQemu(dir);
    if (pid !== null) await stopMicrovm(pid);
    await removeMicrovm(dir);
  }

  private entry(id: string): Vm {
    const vm = this.vms.get(id);
    if (!vm) throw new WarrenError('not_found', `sandbox ${id} is not running here`, { id });
    return vm;
  }

  /** Stops its CPUs (QMP `stop`): answers at once; reclaim then saves it to disk. */
  async pause(id: string): Promise<void> {
    const vm = this.entry(id);
    if (vm.saved) return;
    await this.qmp(id, 'stop');
  }

  /**
   * A paused microVM's memory given back whole: its state (memory and devices) saved to disk
   * and its QEMU ended; 0 bytes resident. A resume meanwhile (`signal`) cancels the save.
   */
  async reclaim(id: string, signal?: AbortSignal): Promise<number> {
    const vm = this.entry(id);
    await vm.freezing;
    if (vm.saved) return 0;
    let done = (): void => undefined;
    vm.saving = new Promise<void>((r) => (done = r));
    try {
      if (!(await saveMicrovm(this.vmDir(id), vm.pid, signal))) return (await this.stats(id)).memoryBytes;
      vm.mux.close();
      vm.saved = true;
      vm.pid = 0;
      return 0;
    } finally {
      vm.saving = null;
      done();
    }
  }

  /** A batch microVM's new QEMU (a restore's) made batch as its first one was. */
  private async batchAgain(dir: string, pid: number): Promise<void> {
    if (existsSync(join(dir, BATCH_FILE))) await this.o.batchProcess?.(pid);
  }

  /** Its CPUs again (QMP `cont`), or, once saved, a new QEMU from its state. */
  async resume(id: string): Promise<void> {
    const vm = this.entry(id);
    if (vm.saved) {
      const r = await restoreMicrovm(this.vmDir(id), vm.mux, this.vmTap(vm.link), this.o.bootTimeoutMs);
      vm.pid = r.pid;
      vm.start = await processStartTime(r.pid);
      vm.saved = false;
      await this.batchAgain(this.vmDir(id), r.pid);
      return;
    }
    await this.qmp(id, 'cont');
  }

  /**
   * Its writable layer as a new layer: the guest writes its overlay's upper directory as a layer
   * tar (its file system frozen meanwhile; EXPORT, native/vm/export.c) and the node unpacks it as
   * it unpacks a registry's layer, trusting nothing in it. The guest runs for as long as that
   * takes (a saved one is started again first) and is stopped again after: the caller froze it.
   */
  async commit(id: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo> {
    const vm = this.entry(id);
    const dir = this.vmDir(id);
    // A save under way (the page-out of a pause) ends first: then it has a QEMU, or it is saved.
    await vm.saving;
    if (vm.saved) await this.resume(id);
    else await this.qmp(id, 'cont');
    try {
      return await this.exportLayer(vm.mux, dir, opts);
    } finally {
      await this.qmp(id, 'stop').catch(() => undefined);
    }
  }

  /** The writable layer of the running guest in `dir`, reached through `mux`, as a new layer (see commit). */
  private async exportLayer(mux: AgentMux, dir: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo> {
    // Bounded by its disk: a layer tar of it is no larger than twice it (headers), whatever the guest sends.
    const disk = (await stat(vmFiles(dir).rw)).size;
    return this.o.store.addLayerTar(endMarked(await mux.exportLayer()), {
      idMap: this.o.idMap,
      ops: this.o.fsOps,
      maxBytes: 2 * disk + 64 * 2 ** 20,
      exclude: opts.exclude,
      excludeRegex: opts.excludeRegex,
    });
  }

  /**
   * Its display now, as a PNG: QEMU dumps the screen as a PPM into its directory (QEMU 7.2's own
   * PNG dump swaps red and blue), which is read (bounded) and encoded here, one capture of a VM
   * at a time and a few of the node's at once (VmScreens).
   */
  async screen(id: string): Promise<Buffer> {
    const vm = this.entry(id);
    if (vm.saved) throw new WarrenError('conflict', `sandbox ${id} is paused`, { id });
    return this.screens.png(id, join(this.vmDir(id), 'screen.ppm'));
  }

  /**
   * Keys, text and pointer events to its display (its virtio keyboard and tablet), each change a
   * QMP call of its own, in order, paced by what its guest has read and acknowledged
   * (input-flow.ts): done when the guest has handled them all.
   */
  async input(id: string, events: InputEvent[]): Promise<void> {
    const vm = this.entry(id);
    if (vm.saved) throw new WarrenError('conflict', `sandbox ${id} is paused`, { id });
    const strokes = inputStrokes(events, VM_SCREEN);
    const q = await Qmp.open(vmFiles(this.vmDir(id)).qmp);
    try {
      await sendStrokes(q, strokes, (vm.input ??= {}));
    } finally {
      q.close();
    }
  }

  /** One QMP command to its QEMU, on a connection of its own. */
  private async qmp(id: string, command: string, args?: Record<string, unknown>): Promise<void> {
    const q = await Qmp.open(vmFiles(this.vmDir(id)).qmp);
    try {
      await q.execute(command, args);
    } finally {
      q.close();
    }
  }

  /**
   * CPU time and memory of its QEMU: what the VMM really holds, guest and device model together,
   * as the host sees it (never as its guest says): its proportional set (a clone's share of its
   * template's pages counts once over all clones), and its share of swap (see memory).
   */
  async stats(id: string): Promise<SandboxStats> {
    const vm = this.entry(id);
    if (vm.saved) return { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
    const m = await qemuMemory(vm.pid, 0);
    return { cpuSeconds: (await processCpuSeconds(vm.pid)) ?? 0, memoryBytes: m?.pssBytes ?? 0, swapBytes: m?.swapBytes ?? 0 };
  }

  /**
   * What a microVM really holds of the host's memory (VmMemory): its proportional set in RAM and
   * what its swapped-out pages cost there (zram's compressed share), read from the host's /proc;
   * nothing while it is saved to disk (paused). What admission should count for it.
   */
  async memory(id: string): Promise<VmMemory> {
    const vm = this.entry(id);
    const none: VmMemory = { pssBytes: 0, anonBytes: 0, fileBytes: 0, swapBytes: 0, swapHeldBytes: 0, heldBytes: 0 };
    if (vm.saved) return none;
    return (await qemuMemory(vm.pid, await hostSwapCost())) ?? none;
  }

  async totals(): Promise<SandboxStats> {
    const sum = { cpuSeconds: 0, memoryBytes: 0, swapBytes: 0 };
    let beyond = 0;
    const swapCost = await hostSwapCost();
    for (const [id, vm] of this.vms) {
      if (vm.saved) continue;
      const m = await qemuMemory(vm.pid, swapCost).catch(() => null);
      if (!m) continue;
      sum.cpuSeconds += (await processCpuSeconds(vm.pid).catch(() => null)) ?? 0;
      sum.memoryBytes += m.pssBytes;
      sum.swapBytes += m.swapBytes;
      // What it really holds (its swapped pages at what they cost in zram) past what it requested.
      beyond += Math.max(0, Math.ceil(m.heldBytes / 2 ** 20) - (this.requests.get(id) ?? memoryRequestOf({ memoryMiB: vm.memoryMiB })));
    }
    this.beyond = beyond;
    return sum;
  }

  /** What its QEMUs held beyond their guests' memory at the last `totals` (device model, TCG's code cache). */
  heldBeyondRequestsMiB(): number {
    return this.beyond;
  }

  /** Whether its QEMU is gone (one saved to disk while paused, or being saved, has none and lives on). */
  async exited(sb: BackendSandbox): Promise<boolean> {
    const vm = this.vms.get(sb.id);
    if (vm?.saved || vm?.saving) return false;
    const pid = vm?.pid ?? sb.initPid;
    return !pid || processExited(pid, vm ? vm.start : sb.initStartTime);
  }

  /**
   * The microVM as it is now (stopped by the edge, or saved to disk by a reclaim) becomes fork
   * base `baseId` (MicrovmForkBases): its memory, devices and writable disk. It stays as it was:
   * stopped (its QEMU `postmigrate` until it runs again) or saved.
   */
  async freeze(id: string, baseId: string): Promise<void> {
    const vm = this.entry(id);
    // A save under way (the page-out of a pause) ends first: then it has a QEMU, or it is saved.
    await vm.saving;
    let done = (): void => undefined;
    const prior = vm.freezing;
    vm.freezing = new Promise<void>((r) => (done = r));
    try {
      await prior;
      await this.forkBases.make(baseId, this.vmDir(id), vm.saved, this.o.bootTimeoutMs);
    } finally {
      vm.freezing = null;
      done();
    }
  }

  /**
   * A fork base's files (its source's writable layer as it was frozen) as a new layer, pinned as
   * commit's: a QEMU of its own starts from the base as a fork does (with a tap of its own if the
   * base's guest had one, bound to nothing), its guest writes its writable layer as commit's does,
   * and that QEMU ends.
   */
  async baseLayer(baseId: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo> {
    const base = await this.forkBases.path(baseId);
    const { tap } = JSON.parse(await readFile(vmFiles(base).spec, 'utf8')) as { tap?: string | null };
    // Named `.partial`: what a crash leaves is swept with the bases' leftovers.
    const dir = `${base}-${randomBytes(4).toString('hex')}.partial`;
    await mkdir(dir, { mode: 0o700 });
    const mux = new AgentMux(vmFiles(dir).agent, helloFor('sandbox'));
    let pid = 0;
    try {
      const own = tap ? unboundTap() : null;
      pid = (await cloneMicrovm(dir, base, mux, own, this.o.bootTimeoutMs)).pid;
      return await this.exportLayer(mux, dir, opts);
    } finally {
      mux.close();
      if (pid) await stopMicrovm(pid);
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** The fork bases on this node. */
  bases(): Promise<string[]> {
    return this.forkBases.list();
  }

  /** A fork base's entry among them: the base goes (its forks run on: each has its own copy of what it needs). */
  async releaseLayers(digests: string[]): Promise<void> {
    for (const d of digests) {
      const base = forkBaseOf(d);
      if (base) await this.forkBases.remove(base);
    }
  }

  async forgetLayers(digests: string[]): Promise<void> {
    await this.releaseLayers(digests);
  }

  async list(): Promise<string[]> {
    if (!existsSync(this.o.dir)) return [];
    // A sandbox made of a spare is a link to the spare's directory; spares themselves are no sandboxes.
    return (await readdir(this.o.dir, { withFileTypes: true }))
      .filter((d) => (d.isDirectory() || d.isSymbolicLink()) && !d.name.startsWith('.'))
      .map((d) => d.name);
  }

  /** The microVMs run on (a restarted edge adopts them); only the connections to them close. */
  async close(): Promise<void> {
    await this.pager?.stop();
    await (await this.ksm)?.close();
    this.ksm = null;
    for (const vm of this.vms.values()) vm.mux.close();
    this.vms.clear();
    this.requests.clear();
    await this.spares?.close();
  }
}
