import { daxLayout, type DaxRegion } from './dax-layout.js';

/** One image layer as the guest gets it: its EROFS file, and its file data when split off. */
export interface VmLayer {
  meta: string;
  data: string | null;
}

/** Everything one microVM's (or full VM's) QEMU is started with. */
export interface MicrovmSpec {
  /** The machine: `microvm` (absent) or a full VM (`vm`: q35, PCI, a display; see vmArgs). */
  kind?: 'microvm' | 'vm';
  kernel: string;
  initrd: string;
  cpus: number;
  memoryMiB: number;
  /** Bottom first. */
  layers: VmLayer[];
  /** The writable disk (ext4, made by the host): the overlay's upper. */
  rwDisk: string;
  /** QEMU listens here for the agent's port (the edge's AgentMux connects). */
  agentSocket: string;
  /** QEMU's QMP socket (stop, cont, migrate, quit). */
  qmpSocket: string;
  /**
   * QEMU listens here for the guest's serial console: the edge reads it while the guest boots
   * (its errors), and what the guest writes while nobody reads is dropped (a file would let a
   * guest fill the node's disk).
   */
  consoleSocket: string;
  pidFile: string;
  /** `kvm` where /dev/kvm can really run a guest, else `tcg`. */
  accel: 'kvm' | 'tcg';
  /**
   * The host's TSC rate (kHz), handed to the guest kernel under TCG: the microvm machine has no
   * HPET, and calibrating the TSC against the PIT fails on a busy host, after which the boot
   * hangs (here, by hand: 11 of 48 boots without it, 0 of 24 with it).
   */
  tscKhz?: number | null;
  /**
   * The machine has no PIT (`withoutPit`: under TCG with the TSC's rate told, the guest never
   * uses one). Absent in a spec saved before: a PIT then, whose saved state needs one.
   */
  noPit?: boolean;
  /**
   * Its RAM as a file rather than anonymous memory: `shared` (a template) writes the file,
   * otherwise it is mapped copy-on-write (a clone of that template: the pages it does not
   * write stay the template's, one copy in the page cache for all its clones).
   */
  ram?: { file: string; shared: boolean } | null;
  /**
   * The ids the layers' files are stored with start here (the node's layer range): the guest
   * mounts them idmapped so that BASE shows as 0, as a container's user namespace does.
   */
  idShift?: { base: number; size: number } | null;
  /**
   * The tap its NIC's frames go through (QEMU opens it by this name, on the host); none: the NIC
   * has no peer (a template's: its clones each get their own).
   */
  tap?: string | null;
  /**
   * The layers' files mapped into the guest (see dax-layout.ts), bottom first, a layer's data
   * blob after its image; absent or null: they are virtio disks. Only on the microvm machine.
   */
  dax?: DaxRegion[] | null;
}

/** Every guest's NIC's MAC address: each microVM's link is an Ethernet of its own (a tap), so one address serves all. */
export const GUEST_MAC = '02:77:72:6e:00:01';

/** The RAM's id: the microvm machine's own name for it, so a state saved with one kind of RAM loads into another. */
export const RAM_ID = 'microvm.ram';
/** The same for the q35 machine. */
const PC_RAM_ID = 'pc.ram';

/**
 * A full VM's display: the VESA mode its kernel sets at boot (`vga=0x344`: QEMU's VGA BIOS mode 0x144
 * plus Linux's 0x200), 32 bits a pixel (X's fbdev driver cannot draw on the 24-bit packed 0x318).
 */
export const VM_SCREEN = { width: 1024, height: 768, vesaMode: '0x344' } as const;

/**
 * The most a microVM's QEMU keeps of its guest's code translated under TCG (MiB; QEMU's default is
 * a GiB): a guest that keeps writing new code cannot grow its QEMU past its RAM by more than this.
 * A guest's whole working set fits (an idle debian-python guest and a python3 start translate
 * about 30 MiB); past it, TCG starts over, translating again what runs next.
 */
export const TCG_CODE_MIB = 64;

/** QEMU's arguments for the machine `s` names (pure). */
export function qemuArgs(s: MicrovmSpec): string[] {
  if (s.kind === 'vm' && s.dax) throw new Error("a full VM's layers are its disks: no DAX");
  return s.kind === 'vm' ? vmArgs(s) : microvmArgs(s);
}

/**
 * QEMU's arguments for a microVM (pure): the `microvm` machine (no firmware, no PCI, virtio over
 * MMIO), direct kernel boot into Warren's initramfs, each layer a read-only virtio disk named by
 * its serial (warren-lN, its data warren-dN), the writable disk warren-rw, the agent on the
 * virtio-serial port warren.agent, one NIC (virtio-net, on `tap` when given), nothing else: no
 * display, no defaults.
 */
export function microvmArgs(s: MicrovmSpec): string[] {
  const kinds = s.layers.map((l) => (l.data ? 'd' : 'm')).join('');
  const nic = nicArgs(s.tap, 'mmio');
  // With DAX the guest's memory is NUMA nodes, its own RAM (RAM_ID, as without) the first.
  const dax = s.dax ? daxLayout(s.memoryMiB, ramBackend(s, RAM_ID), RAM_ID, s.dax) : null;
  const disks = dax ? [] : s.layers.flatMap((l, i) => [...drive(`l${i}`, l.meta, true), ...(l.data ? drive(`d${i}`, l.data, true) : [])]);
  const ram = dax ? dax.args : ramArgs(s, RAM_ID);
  // The guest kernel takes persistent memory into its resources only once its PCI set-up has run.
  const machine = `microvm,x-option-roms=off,rtc=on${s.noPit ? ',pit=off' : ''}${dax ? ',pcie=on' : s.ram ? `,memory-backend=${RAM_ID}` : ''}`;
  const daxCmdline = dax ? ` warren.dax ${dax.memmap.join(' ')}` : '';
  // prettier-ignore
  return [
    '-M', machine,
    '-accel', s.accel === 'tcg' ? `tcg,tb-size=${TCG_CODE_MIB}` : s.accel,
    '-cpu', s.accel === 'kvm' ? 'host' : 'max',
    '-smp', String(Math.max(1, Math.ceil(s.cpus))),
    '-m', `${dax ? dax.totalMiB : s.memoryMiB}M`,
    ...ram,
    '-nodefaults', '-no-user-config', '-no-reboot', '-display', 'none',
    '-kernel', s.kernel,
    '-initrd', s.initrd,
    '-append', `console=ttyS0 quiet panic=-1 init_on_free=1${s.accel === 'tcg' ? tcgClockArgs(s.tscKhz) : ''} warren.layers=${kinds}${s.idShift ? ` warren.idshift=${s.idShift.base}:${s.idShift.size}` : ''}${daxCmdline}`,
    '-chardev', `socket,id=console,path=${s.consoleSocket},server=on,wait=off`,
    '-serial', 'chardev:console',
    ...disks,
    ...drive('rw', s.rwDisk, false),
    ...nic,
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=agent,path=${s.agentSocket},server=on,wait=off`,
    '-device', 'virtserialport,chardev=agent,name=warren.agent',
    '-qmp', `unix:${s.qmpSocket},server=on,wait=off`,
    '-pidfile', s.pidFile,
    '-daemonize',
  ];
}

/**
 * Whether a new microVM's machine goes without a PIT (pure): under TCG, told the TSC's rate, the
 * guest never uses one, and QEMU's emulated PIT woke its main loop every 27 ms all the same (an
 * idle QEMU 0.53 % of a CPU with it, 0.33 % without). Without the rate the guest calibrates its
 * TSC against the PIT; on KVM the PIT is the kernel's and costs nothing.
 */
export const withoutPit = (accel: 'kvm' | 'tcg', tscKhz: number | null | undefined): boolean => accel === 'tcg' && !!tscKhz;

/**
 * The guest kernel's clock arguments under TCG (pure). `tsc_early_khz`: the TSC's rate (see
 * MicrovmSpec.tscKhz). `tsc=reliable`: the TSC is not checked against a watchdog. The microvm
 * machine has no HPET or PM timer, so the only watchdog is the guest's own tick count, and a TCG
 * guest loses ticks whenever the host is busy: the kernel then marks the TSC unstable and falls
 * back to the jiffies clock for good, which cannot go tickless, so an idle guest takes a timer
 * interrupt every 4 ms (its QEMU used 4.5 % of a CPU idle instead of 0.7 %). Under TCG the
 * guest's TSC is the host's constant TSC, scaled: reliable as the host's own.
 */
export function tcgClockArgs(tscKhz: number | null | undefined): string {
  return `${tscKhz ? ` tsc_early_khz=${Math.round(tscKhz)}` : ''} tsc=reliable`;
}

/**
 * QEMU's arguments for a full VM (pure): the `q35` machine with its firmware (SeaBIOS), virtio
 * over PCI, a VGA display in VM_SCREEN's mode and a virtio keyboard and tablet (QMP's
 * input-send-event reaches the guest through them; the tablet's pointer is absolute). It boots
 * the standard kernel into the same initramfs as a microVM, whose stage hands over to the image's
 * own /sbin/init (`warren.systemd`); disks, agent port and NIC as in microvmArgs, on PCI.
 */
export function vmArgs(s: MicrovmSpec): string[] {
  const kinds = s.layers.map((l) => (l.data ? 'd' : 'm')).join('');
  const pci = 'pci' as const;
  const disks = s.layers.flatMap((l, i) => [...drive(`l${i}`, l.meta, true, pci), ...(l.data ? drive(`d${i}`, l.data, true, pci) : [])]);
  // prettier-ignore
  return [
    '-M', `q35${s.ram ? `,memory-backend=${PC_RAM_ID}` : ''}`,
    '-accel', s.accel,
    '-cpu', s.accel === 'kvm' ? 'host' : 'max',
    '-smp', String(Math.max(1, Math.ceil(s.cpus))),
    '-m', `${s.memoryMiB}M`,
    ...ramArgs(s, PC_RAM_ID),
    '-nodefaults', '-no-user-config', '-no-reboot', '-display', 'none',
    '-device', 'VGA',
    '-kernel', s.kernel,
    '-initrd', s.initrd,
    '-append', `console=ttyS0 quiet panic=-1 vga=${VM_SCREEN.vesaMode} net.ifnames=0 warren.systemd warren.layers=${kinds}${s.idShift ? ` warren.idshift=${s.idShift.base}:${s.idShift.size}` : ''}`,
    '-chardev', `socket,id=console,path=${s.consoleSocket},server=on,wait=off`,
    '-serial', 'chardev:console',
    ...disks,
    ...drive('rw', s.rwDisk, false, pci),
    ...nicArgs(s.tap, pci),
    '-device', 'virtio-serial-pci',
    '-chardev', `socket,id=agent,path=${s.agentSocket},server=on,wait=off`,
    '-device', 'virtserialport,chardev=agent,name=warren.agent',
    '-device', 'virtio-keyboard-pci,id=warren-kbd',
    '-device', 'virtio-tablet-pci,id=warren-tablet',
    '-qmp', `unix:${s.qmpSocket},server=on,wait=off`,
    '-pidfile', s.pidFile,
    '-daemonize',
  ];
}

/** Its NIC (virtio-net on `bus`'s transport), on the tap named `tap` when given, else with no peer. */
function nicArgs(tap: string | null | undefined, bus: 'mmio' | 'pci'): string[] {
  if (tap && !/^[A-Za-z0-9_-]{1,15}$/.test(tap)) throw new Error(`a microVM's tap name is 1 to 15 letters, digits, _ or -: ${tap}`);
  const device = bus === 'pci' ? 'virtio-net-pci' : 'virtio-net-device';
  return tap
    ? ['-netdev', `tap,id=net0,ifname=${tap},script=no,downscript=no`, '-device', `${device},netdev=net0,mac=${GUEST_MAC}`]
    : ['-device', `${device},mac=${GUEST_MAC}`];
}

/** Its RAM as the file `s.ram` names (see MicrovmSpec.ram), by the machine's own id for it; none: anonymous. */
function ramArgs(s: MicrovmSpec, id: string): string[] {
  return s.ram ? ['-object', ramBackend(s, id)] : [];
}

/** The `-object` of its RAM: the file `s.ram` names, else anonymous memory. */
function ramBackend(s: MicrovmSpec, id: string): string {
  if (!s.ram) return `memory-backend-ram,id=${id},size=${s.memoryMiB}M`;
  if (/[,\s]/.test(s.ram.file)) throw new Error(`a microVM's RAM file may not hold commas or spaces: ${s.ram.file}`);
  return `memory-backend-file,id=${id},size=${s.memoryMiB}M,mem-path=${s.ram.file},share=${s.ram.shared ? 'on' : 'off'}`;
}

/** A virtio disk (on `bus`'s transport) with `serial` = `warren-ID` (how the guest finds it). */
function drive(id: string, file: string, readonly: boolean, bus: 'mmio' | 'pci' = 'mmio'): string[] {
  if (/[,\s]/.test(file)) throw new Error(`a microVM disk path may not hold commas or spaces: ${file}`);
  // prettier-ignore
  return [
    '-drive', `id=${id},file=${file},format=raw,if=none,${readonly ? 'readonly=on' : 'discard=unmap'}`,
    '-device', `${bus === 'pci' ? 'virtio-blk-pci' : 'virtio-blk-device'},drive=${id},serial=warren-${id}`,
  ];
}
