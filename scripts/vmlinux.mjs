// node scripts/vmlinux.mjs BZIMAGE OUT: unpacks a bzImage's kernel into OUT (an ELF) when it can
// be started directly (a PVH entry); QEMU's microvm machine then boots it with no unpacking in
// the guest. Writes OUT whole or not at all; says why on stderr and exits 0 when it cannot.
import { spawnSync } from 'node:child_process';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { bzImagePayload, hasPvhEntry } from '../packages/edge/dist/backends/microvm/kernel-image.js';

const [src, out] = process.argv.slice(2);
if (!src || !out) {
  console.error('usage: node scripts/vmlinux.mjs BZIMAGE OUT');
  process.exit(2);
}
const img = readFileSync(src);
const payload = bzImagePayload(img);
if (!payload) {
  console.error(`vmlinux: ${src} is no bzImage with a payload this script can unpack; microVMs boot it as it is`);
  process.exit(0);
}
const [cmd, ...args] = payload.unpack;
const r = spawnSync(cmd, args, { input: img.subarray(payload.offset, payload.offset + payload.length), maxBuffer: 1 << 30 });
// A kernel's payload ends in its size, which some unpackers read as trailing garbage: the ELF is whole anyway.
const elf = r.stdout ?? Buffer.alloc(0);
if (!hasPvhEntry(elf)) {
  console.error(
    `vmlinux: ${payload.format} payload of ${src} did not unpack to a kernel with a PVH entry (${cmd}: ${String(r.error ?? r.stderr)
      .trim()
      .slice(0, 200)}); microVMs boot the bzImage`,
  );
  process.exit(0);
}
const tmp = `${out}.${process.pid}.partial`;
writeFileSync(tmp, elf);
try {
  renameSync(tmp, out);
} catch (e) {
  rmSync(tmp, { force: true });
  throw e;
}
