/** One entry of an initramfs: a directory, or a file with its bytes. */
export type CpioEntry = { path: string; dir: true; mode?: number } | { path: string; data: Buffer; mode?: number };

const pad4 = (n: number): number => (4 - (n % 4)) % 4;
const hex8 = (n: number): string => n.toString(16).padStart(8, '0');

/**
 * An archive in the kernel's initramfs format (cpio "newc", uncompressed): what `-initrd` hands
 * a microVM. Pure: the same entries give the same bytes (mtime 0, inode numbers by order).
 * Paths are relative ("init", "modules/virtio.ko"); parents must come before their children.
 */
export function cpioNewc(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  const add = (name: string, mode: number, data: Buffer, ino: number): void => {
    if (name.startsWith('/') || name.split('/').includes('..')) throw new Error(`cpio: bad path ${name}`);
    const nameBytes = Buffer.from(name + '\0');
    const header = '070701' + [ino, mode, 0, 0, mode & 0o040000 ? 2 : 1, 0, data.length, 0, 0, 0, 0, nameBytes.length, 0].map(hex8).join('');
    parts.push(Buffer.from(header, 'ascii'), nameBytes, Buffer.alloc(pad4(110 + nameBytes.length)), data, Buffer.alloc(pad4(data.length)));
  };
  entries.forEach((e, i) => {
    if ('dir' in e) add(e.path, 0o040000 | (e.mode ?? 0o755), Buffer.alloc(0), i + 1);
    else add(e.path, 0o100000 | (e.mode ?? 0o644), e.data, i + 1);
  });
  add('TRAILER!!!', 0, Buffer.alloc(0), 0);
  return Buffer.concat(parts);
}
