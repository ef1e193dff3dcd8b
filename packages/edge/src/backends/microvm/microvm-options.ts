import type { FsOps, IdMap, LayerStore } from '@warren/images';
import type { KsmOptions } from '../../host/ksm.js';
import type { TapLink } from '../backend.js';
import type { GuestKit } from './guest-kit.js';
import type { IdlePolicy } from './idle-pageout.js';

/** What a MicrovmBackend is made with. */
export interface MicrovmBackendOptions {
  /**
   * Its machines: `microvm` (the default) or full VMs (`vm`: q35 with a display, the image's own
   * systemd as PID 1; see vmArgs). The backend's name is this.
   */
  kind?: 'microvm' | 'vm';
  /** Each microVM's files go in a directory of its own below this one. */
  dir: string;
  /** Where a sandbox's layers come from (their EROFS files are the guest's read-only disks), and where its commits go. */
  store: Pick<LayerStore, 'ensureMeta' | 'layerPath' | 'dataPath' | 'addLayerTar'>;
  /** What a commit's unpacking needs of the host (device nodes, xattrs). */
  fsOps: FsOps;
  /** The ids layers are stored with (a guest's files are owned by ids from 0; a commit shifts them so). */
  idMap: IdMap;
  /** The kernel and initramfs (built on first use). */
  kit: () => Promise<GuestKit>;
  accel: 'kvm' | 'tcg';
  /** The writable disk of a sandbox that asks for no size (MiB). */
  defaultDiskMiB: number;
  /** How long a guest has to answer after QEMU starts (ms). */
  bootTimeoutMs?: number;
  /**
   * Where templates go (freshly booted microVMs saved, one per image and size, that creates
   * clone); null: every create boots its guest (cold).
   */
  templateDir: string | null;
  /** QEMUs kept started for the next clones (see MicrovmSpares; default 1). */
  spares?: number;
  /** The ids the node's layers are stored with start here (see MicrovmSpec.idShift). */
  idShift?: { base: number; size: number } | null;
  /**
   * Makes a tap a microVM's QEMU opened the host end of its sandbox's link (SandboxNetwork.bindTap);
   * absent: the node has no sandbox network, and microVMs have loopback only.
   */
  bindTap?: (tap: string, link: TapLink) => Promise<void>;
  /**
   * Makes a batch sandbox's QEMU batch (host/cpu-class.ts: its threads SCHED_IDLE, its process in
   * the node's batch cgroup); absent: a create that asks for the batch class is refused.
   */
  batchProcess?: (pid: number) => Promise<void>;
  /** native/build/warren-pageout: an idle microVM's QEMU is paged out with it (IdlePager); absent: never. */
  pageoutPath?: string | null;
  /** When an idle one is (default IDLE_POLICY). */
  idlePolicy?: IdlePolicy;
  /**
   * The kernel's samepage merging, turned on while the backend runs (host/ksm.ts): what guests
   * hold alike (their page caches of the same image files above all) is kept once. A guest may
   * time its own writes to learn whether another holds a page it guesses (a side channel of
   * any merging across tenants): null leaves KSM as it is.
   */
  ksm?: KsmOptions | null;
  /** A microVM's layers mapped into its guest (dax-layout.ts: one page cache for every guest) rather than read through virtio disks. */
  daxLayers?: boolean;
}
