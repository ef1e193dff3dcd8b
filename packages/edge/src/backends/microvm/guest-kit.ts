import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import { cpioNewc, type CpioEntry } from './cpio.js';

/**
 * The guest kernel's modules a microVM loads before anything else (paths under the kernel's
 * `kernel/` tree, dependencies first): virtio over MMIO, its disks, serial ports and NIC, legacy
 * persistent memory (its layers when they are mapped into it: dax-layout.ts), EROFS (and
 * libcrc32c, which it needs) and overlay. Debian's cloud kernel builds them all as modules.
 */
export const GUEST_MODULES = [
  'drivers/virtio/virtio_ring.ko',
  'drivers/virtio/virtio.ko',
  'drivers/virtio/virtio_mmio.ko',
  'drivers/block/virtio_blk.ko',
  'drivers/char/virtio_console.ko',
  'net/core/failover.ko',
  'drivers/net/net_failover.ko',
  'drivers/net/virtio_net.ko',
  'drivers/nvdimm/libnvdimm.ko',
  'drivers/nvdimm/nd_btt.ko',
  'drivers/nvdimm/nd_pmem.ko',
  'drivers/nvdimm/nd_e820.ko',
  'lib/libcrc32c.ko',
  'fs/erofs/erofs.ko',
  'fs/overlayfs/overlay.ko',
];

/**
 * The guest kernel's modules a full VM loads first (see GUEST_MODULES): Debian's standard kernel,
 * which has the VESA framebuffer the display needs built in, on a PCI machine, and builds ext4,
 * crc32c and the virtio transports as modules; its keyboard and tablet are virtio input devices.
 */
export const VM_GUEST_MODULES = [
  'drivers/virtio/virtio_ring.ko',
  'drivers/virtio/virtio.ko',
  'drivers/virtio/virtio_pci_modern_dev.ko',
  'drivers/virtio/virtio_pci_legacy_dev.ko',
  'drivers/virtio/virtio_pci.ko',
  'drivers/block/virtio_blk.ko',
  'drivers/char/virtio_console.ko',
  'net/core/failover.ko',
  'drivers/net/net_failover.ko',
  'drivers/net/virtio_net.ko',
  'crypto/crc32c_generic.ko',
  'lib/libcrc32c.ko',
  'fs/erofs/erofs.ko',
  'fs/overlayfs/overlay.ko',
  'lib/crc16.ko',
  'fs/mbcache.ko',
  'fs/jbd2/jbd2.ko',
  'fs/ext4/ext4.ko',
  'drivers/virtio/virtio_input.ko',
  'drivers/input/evdev.ko',
];

/** Which guests a kit boots: microVMs (the cloud kernel) or full VMs (the standard one). */
export type GuestKind = 'microvm' | 'vm';

/** The file in the guest cache that names each kind's unpacked kernel package (scripts/guest-kernel.sh). */
const CURRENT: Record<GuestKind, string> = { microvm: 'current', vm: 'current-vm' };
const MODULES: Record<GuestKind, string[]> = { microvm: GUEST_MODULES, vm: VM_GUEST_MODULES };

/** What boots a microVM: the kernel and the initramfs Warren built for it. */
export interface GuestKit {
  kernel: string;
  initrd: string;
  /** The kernel package's name (which kernel the guests run). */
  release: string;
}

/**
 * The entries of a microVM's initramfs (pure): the stage as /init, the modules, and the platform
 * files (warren-init and what a container finds at /.warren too) under platform/.
 */
export function initramfsEntries(files: {
  stage: Buffer;
  platform: Array<{ name: string; data: Buffer }>;
  modules: Array<{ name: string; data: Buffer }>;
}): CpioEntry[] {
  return [
    { path: 'init', data: files.stage, mode: 0o755 },
    { path: 'modules', dir: true },
    ...files.modules.map((m) => ({ path: `modules/${m.name}`, data: m.data })),
    { path: 'modules/order', data: Buffer.from(files.modules.map((m) => m.name).join('\n') + '\n') },
    { path: 'platform', dir: true },
    ...files.platform.map((f) => ({ path: `platform/${f.name}`, data: f.data, mode: 0o755 })),
  ];
}

/**
 * The guest kit under `cacheDir` (the kernel `scripts/guest-kernel.sh` unpacked there), its
 * initramfs built from `stage` (warren-vmstage) and the files of `platformDir` (warren-init and
 * the rest of /.warren) if this build has none yet (named by the hash of what went in, written
 * whole or not at all).
 */
export async function guestKit(cacheDir: string, stage: string, platformDir: string, kind: GuestKind = 'microvm'): Promise<GuestKit> {
  const current = join(cacheDir, CURRENT[kind]);
  const release = existsSync(current) ? (await readFile(current, 'utf8')).trim() : '';
  const kernelDir = join(cacheDir, release);
  // A microVM boots the kernel unpacked (an ELF with a PVH entry, which QEMU's microvm machine
  // starts directly) where scripts/guest-kernel.sh could make one: under TCG, unpacking the
  // compressed kernel inside the guest is a good part of a cold boot.
  const unpacked = join(kernelDir, 'vmlinux');
  const kernel = kind === 'microvm' && existsSync(unpacked) ? unpacked : join(kernelDir, 'vmlinuz');
  if (!release || !existsSync(kernel))
    throw new WarrenError(
      'unavailable',
      `no ${kind === 'vm' ? 'full-VM' : 'microVM'} guest kernel in ${cacheDir}: run scripts/guest-kernel.sh (bash scripts/setup.sh does)`,
      { cacheDir },
    );
  const modules = await Promise.all(MODULES[kind].map(async (m) => ({ name: m.split('/').pop()!, data: await readFile(join(kernelDir, 'modules', m)) })));
  const names = (await readdir(platformDir, { withFileTypes: true })).filter((d) => d.isFile()).map((d) => d.name);
  if (!names.includes('warren-init')) throw new WarrenError('internal', `no warren-init in ${platformDir}`);
  const platform = await Promise.all(names.sort().map(async (name) => ({ name, data: await readFile(join(platformDir, name)) })));
  const entries = initramfsEntries({ stage: await readFile(stage), platform, modules });
  const archive = cpioNewc(entries);
  const initrd = join(cacheDir, `initrd-${createHash('sha256').update(archive).digest('hex').slice(0, 16)}.cpio`);
  if (!existsSync(initrd)) {
    await mkdir(cacheDir, { recursive: true });
    const tmp = `${initrd}.${process.pid}.partial`;
    await writeFile(tmp, archive);
    await rename(tmp, initrd);
  }
  return { kernel, initrd, release };
}
