import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_ID_MAP, type FsOps, type LayerStore } from '@warren/images';
import { chooseAccel } from '../backends/microvm/accel.js';
import { guestKit, type GuestKind, type GuestKit } from '../backends/microvm/guest-kit.js';
import { MicrovmBackend, type MicrovmBackendOptions } from '../backends/microvm/microvm-backend.js';
import { KSM_DEFAULT } from '../host/ksm.js';
import type { SandboxNetwork } from '../net/sandbox-network.js';
import type { EdgeNodeOptions } from './node-options.js';

/** What a VM backend takes from its node: the layer store, host file operations, the native and platform files, the sandbox network. */
export interface GuestHost {
  layers: LayerStore;
  /** Makes a batch sandbox's VMM process batch (host/cpu-class.ts). */
  batchProcess: (pid: number) => Promise<void>;
  fsOps: FsOps;
  nativeDir: string;
  platformDir: string;
  network: SandboxNetwork | null;
}

/** Where `scripts/guest-kernel.sh` unpacks the microVM guest kernel by default. */
export const DEFAULT_GUEST_CACHE = process.env.WARREN_GUEST_CACHE ?? '/var/cache/warren/guest';

/**
 * The microVM backend, when this node can run it: QEMU installed and a guest kernel in the cache
 * (else null, said in the log). Its guests run under KVM when /dev/kvm is there and really runs
 * one (probed once per host boot: on some machines /dev/kvm opens and yet hangs a stock
 * kernel), else under TCG, unless told which.
 */
export async function openMicrovm(o: EdgeNodeOptions, h: GuestHost): Promise<MicrovmBackend | null> {
  const { nativeDir, platformDir } = h;
  if (o.microvm === false) return null;
  const cacheDir = o.microvm?.guestCacheDir ?? DEFAULT_GUEST_CACHE;
  const qemu = ['/usr/bin/qemu-system-x86_64', '/usr/local/bin/qemu-system-x86_64'].some((p) => existsSync(p));
  if (!qemu || !existsSync(join(cacheDir, 'current'))) {
    o.logger.info('no microVM backend on this node (QEMU or the guest kernel is missing: bash scripts/setup.sh installs both)', { cacheDir });
    return null;
  }
  const kitOnce = kitOf(cacheDir, nativeDir, platformDir, 'microvm');
  const accel = o.microvm?.accel ?? (await chooseAccel(cacheDir, kitOnce).catch(() => 'tcg' as const));
  return new MicrovmBackend({
    dir: join(o.dataDir, 'microvm'),
    kit: kitOnce,
    accel,
    defaultDiskMiB: 1024,
    templateDir: o.microvm?.snapshots === false ? null : join(o.dataDir, 'microvm-templates'),
    spares: o.microvm ? o.microvm.spares : undefined,
    pageoutPath: join(nativeDir, 'warren-pageout'),
    ksm: o.microvm && o.microvm.ksm === true ? KSM_DEFAULT : null,
    daxLayers: o.microvm?.dax !== false,
    ...guestShared(h),
  });
}

/** What both VM backends take alike from their node: its layers (and their ids), host file operations, its sandbox network's taps. */
function guestShared(h: GuestHost): Pick<MicrovmBackendOptions, 'store' | 'idShift' | 'idMap' | 'fsOps' | 'bindTap' | 'batchProcess'> {
  const network = h.network;
  return {
    store: h.layers,
    idShift: { base: DEFAULT_ID_MAP.hostStart, size: DEFAULT_ID_MAP.size },
    idMap: DEFAULT_ID_MAP,
    fsOps: h.fsOps,
    batchProcess: h.batchProcess,
    bindTap: network ? (tap, link) => network.bindTap(tap, link) : undefined,
  };
}

/** A guest kit of `kind`, built on first use (one that failed is tried again next time). */
function kitOf(cacheDir: string, nativeDir: string, platformDir: string, kind: GuestKind): () => Promise<GuestKit> {
  let kit: Promise<GuestKit> | null = null;
  return () =>
    (kit ??= guestKit(cacheDir, join(nativeDir, 'warren-vmstage'), platformDir, kind).catch((e: unknown) => {
      kit = null;
      throw e;
    }));
}

/**
 * The full-VM backend, when this node can run it: the microVM backend's QEMU and accelerator,
 * and the full VMs' guest kernel in the same cache (else null, said in the log).
 */
export async function openVm(o: EdgeNodeOptions, accel: string, h: GuestHost): Promise<MicrovmBackend | null> {
  const { nativeDir, platformDir } = h;
  const cacheDir = (o.microvm || undefined)?.guestCacheDir ?? DEFAULT_GUEST_CACHE;
  if (!existsSync(join(cacheDir, 'current-vm'))) {
    o.logger.info('no full-VM backend on this node (its guest kernel is missing: bash scripts/setup.sh fetches it)', { cacheDir });
    return null;
  }
  const v = o.vm || undefined;
  return new MicrovmBackend({
    kind: 'vm',
    dir: join(o.dataDir, 'vm'),
    kit: kitOf(cacheDir, nativeDir, platformDir, 'vm'),
    accel: accel === 'kvm' ? 'kvm' : 'tcg',
    defaultDiskMiB: 2048,
    bootTimeoutMs: v?.bootTimeoutMs ?? 600_000,
    templateDir: v?.snapshots === false ? null : join(o.dataDir, 'vm-templates'),
    spares: v?.spares,
    ...guestShared(h),
  });
}
