/**
 * Reading a Linux x86 kernel image (pure): where a bzImage keeps its compressed kernel, and
 * whether an unpacked kernel (an ELF) has a PVH entry, which lets QEMU's microvm machine start it
 * directly, with no unpacking inside the guest (scripts/vmlinux.mjs makes one).
 */

/** The compressions a bzImage's payload may have, by their magic, and the tool that unpacks each. */
const FORMATS = [
  { name: 'lz4', magic: Buffer.from([0x02, 0x21, 0x4c, 0x18]), unpack: ['lz4', '-dc'] },
  { name: 'zstd', magic: Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), unpack: ['zstd', '-dcq'] },
  { name: 'xz', magic: Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), unpack: ['xz', '-dc'] },
  { name: 'gzip', magic: Buffer.from([0x1f, 0x8b]), unpack: ['gzip', '-dc'] },
] as const;

export interface BzPayload {
  offset: number;
  length: number;
  format: (typeof FORMATS)[number]['name'];
  /** The command that unpacks it (stdin to stdout). */
  unpack: readonly string[];
}

/**
 * The compressed kernel inside a bzImage (boot protocol 2.08+: `payload_offset` and
 * `payload_length` in its setup header, from the start of the protected-mode code); null if
 * `img` is no such image or its compression is one not known here.
 */
export function bzImagePayload(img: Buffer): BzPayload | null {
  if (img.length < 0x250 || img.toString('latin1', 0x202, 0x206) !== 'HdrS' || img.readUInt16LE(0x206) < 0x208) return null;
  const setupSectors = img[0x1f1] || 4;
  const offset = (setupSectors + 1) * 512 + img.readUInt32LE(0x248);
  const length = img.readUInt32LE(0x24c);
  if (length === 0 || offset + length > img.length) return null;
  const f = FORMATS.find((x) => img.subarray(offset, offset + x.magic.length).equals(x.magic));
  return f ? { offset, length, format: f.name, unpack: f.unpack } : null;
}

/** Xen's ELF note of a 32-bit physical entry point: what PVH boot starts (XEN_ELFNOTE_PHYS32_ENTRY). */
const PHYS32_ENTRY = 18;

/** Whether `elf` is a 64-bit little-endian x86 ELF whose notes name a PVH entry point. */
export function hasPvhEntry(elf: Buffer): boolean {
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1 || elf.readUInt16LE(18) !== 62) return false;
  const phoff = Number(elf.readBigUInt64LE(32));
  const phentsize = elf.readUInt16LE(54);
  const phnum = elf.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize;
    if (ph + 56 > elf.length) return false;
    if (elf.readUInt32LE(ph) !== 4) continue; // PT_NOTE
    const start = Number(elf.readBigUInt64LE(ph + 8));
    const end = start + Number(elf.readBigUInt64LE(ph + 32));
    if (end > elf.length) return false;
    for (let p = start; p + 12 <= end; ) {
      const namesz = elf.readUInt32LE(p);
      const descsz = elf.readUInt32LE(p + 4);
      const type = elf.readUInt32LE(p + 8);
      const name = elf.toString('latin1', p + 12, p + 12 + Math.max(0, namesz - 1));
      if (name === 'Xen' && type === PHYS32_ENTRY && descsz >= 4) return true;
      p += 12 + align4(namesz) + align4(descsz);
    }
  }
  return false;
}

const align4 = (n: number): number => (n + 3) & ~3;
