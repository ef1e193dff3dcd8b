/**
 * A microVM whose image layers are mapped into its guest (DAX) rather than read through virtio
 * disks: each layer's EROFS file (and its data blob) is a read-only, shared mapping of the host's
 * file, so every guest of a node reads the same pages of the host's page cache, and none keeps a
 * copy in its own. QEMU 7.2's microvm machine cannot plug a virtio-pmem device, so the files are
 * made guest RAM instead: the machine's memory is composed of NUMA nodes (QEMU's `-numa
 * node,memdev=`), the guest's own RAM first, then each file as a node, and the guest kernel is
 * told (`memmap=SIZE!ADDR`) that each file's range is legacy persistent memory, which it serves as
 * `/dev/pmemN`, in address order, and EROFS mounts with `dax=always`.
 *
 * Around them: a file whose size is not a multiple of 2 MiB is padded to one (the kernel maps
 * persistent memory in 2 MiB sections); a 2 MiB gap follows each (adjacent ranges of one type are
 * merged into one device); and a last node of TAIL_MIB takes the initramfs, which QEMU loads at the
 * top of the memory below 4 GiB (the guest's own RAM must not be there: a clone's RAM is its
 * template's file, and this node's is not). Pads, gaps and tail are reserved to the guest
 * (`memmap=SIZE$ADDR`: it never uses them as RAM) and are shared memfds: with the layer files they
 * are shared memory, which `x-ignore-shared` leaves out of every saved state.
 */

/** One file mapped into the guest: its path and size in bytes (a multiple of 4 KiB, as EROFS files are). */
export interface DaxRegion {
  file: string;
  bytes: number;
}

/** The machine's memory laid out (pure): QEMU's `-object` and `-numa` arguments, the guest's `memmap=` arguments, the size for `-m`. */
export interface DaxLayout {
  args: string[];
  memmap: string[];
  totalMiB: number;
}

const MiB = 2 ** 20;
/** The kernel maps persistent memory in sections of this size. */
const ALIGN = 2 * MiB;
/** Room for the initramfs QEMU loads (Warren's is 2 to 10 MiB). */
export const TAIL_MIB = 32;
/** QEMU's limit on NUMA nodes is 128; the guest's command line (2 KiB) holds about 60 memmap= arguments besides the rest. */
export const MAX_DAX_REGIONS = 24;
/** All of it stays below 3 GiB, where the microvm machine puts RAM in one piece. */
const MAX_TOTAL_MIB = 3 * 1024 - 64;

/**
 * The layout for a guest with `memoryMiB` of RAM (node 0, `ramBackend` its `-object` argument,
 * id `ramId`) and `regions` mapped after it, bottom layer first. Throws when they do not fit (see
 * daxFits).
 */
export function daxLayout(memoryMiB: number, ramBackend: string, ramId: string, regions: DaxRegion[]): DaxLayout {
  const fit = daxFits(memoryMiB, regions);
  if (fit !== null) throw new Error(fit);
  const args: string[] = [];
  let node = 0;
  const add = (backend: string, id: string): void => {
    args.push('-object', backend, '-numa', `node,nodeid=${node++},memdev=${id}`);
  };
  const memmap: string[] = [];
  add(ramBackend, ramId);
  let at = memoryMiB * MiB;
  regions.forEach((r, i) => {
    if (/[,\s]/.test(r.file)) throw new Error(`a microVM's layer path may not hold commas or spaces: ${r.file}`);
    add(`memory-backend-file,id=dax${i},mem-path=${r.file},size=${r.bytes},share=on,readonly=on`, `dax${i}`);
    const pad = (ALIGN - (r.bytes % ALIGN)) % ALIGN;
    if (pad) add(`memory-backend-memfd,id=daxpad${i},size=${pad},share=on`, `daxpad${i}`);
    memmap.push(`memmap=${r.bytes + pad}!${at}`);
    at += r.bytes + pad;
    add(`memory-backend-memfd,id=daxgap${i},size=${ALIGN},share=on`, `daxgap${i}`);
    memmap.push(`memmap=${ALIGN}$${at}`);
    at += ALIGN;
  });
  add(`memory-backend-memfd,id=daxtail,size=${TAIL_MIB}M,share=on`, 'daxtail');
  memmap.push(`memmap=${TAIL_MIB * MiB}$${at}`);
  at += TAIL_MIB * MiB;
  return { args, memmap, totalMiB: at / MiB };
}

/** Why `regions` cannot be mapped into a guest of `memoryMiB` (null: they can). Pure. */
export function daxFits(memoryMiB: number, regions: DaxRegion[]): string | null {
  if (regions.length === 0) return 'no layers to map';
  if (regions.length > MAX_DAX_REGIONS) return `${regions.length} layer files, more than ${MAX_DAX_REGIONS}`;
  const bad = regions.find((r) => !Number.isSafeInteger(r.bytes) || r.bytes <= 0 || r.bytes % 4096 !== 0);
  if (bad) return `${bad.file} is ${bad.bytes} bytes, not a whole number of 4 KiB pages`;
  const mapped = regions.reduce((n, r) => n + Math.ceil(r.bytes / ALIGN) * ALIGN + ALIGN, 0) / MiB;
  if (memoryMiB + mapped + TAIL_MIB > MAX_TOTAL_MIB) return `${memoryMiB} MiB of RAM and ${Math.ceil(mapped)} MiB of layers pass ${MAX_TOTAL_MIB} MiB`;
  return null;
}
