import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bzImagePayload, hasPvhEntry } from './kernel-image.js';

/** A bzImage's first bytes: its setup header (boot protocol `version`), `sectors` of setup, and the payload at `payloadOffset`. */
function bzImage(o: { version?: number; sectors?: number; payloadOffset: number; payload: Buffer; total?: number }): Buffer {
  const setupBytes = ((o.sectors || 4) + 1) * 512;
  const img = Buffer.alloc(Math.max(o.total ?? 0, setupBytes + o.payloadOffset + o.payload.length));
  img[0x1f1] = o.sectors ?? 4;
  img.write('HdrS', 0x202, 'latin1');
  img.writeUInt16LE(o.version ?? 0x20f, 0x206);
  img.writeUInt32LE(o.payloadOffset, 0x248);
  img.writeUInt32LE(o.payload.length, 0x24c);
  o.payload.copy(img, setupBytes + o.payloadOffset);
  return img;
}

test('a bzImage payload is found by its setup header and named by its magic', () => {
  const lz4 = Buffer.concat([Buffer.from([0x02, 0x21, 0x4c, 0x18]), Buffer.alloc(100, 7)]);
  const p = bzImagePayload(bzImage({ sectors: 39, payloadOffset: 716, payload: lz4 }));
  assert.deepEqual(p && { offset: p.offset, length: p.length, format: p.format }, { offset: 40 * 512 + 716, length: 104, format: 'lz4' });
  const xz = Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 1, 2]);
  assert.equal(bzImagePayload(bzImage({ sectors: 0, payloadOffset: 0, payload: xz }))?.offset, 5 * 512, 'no sector count: 4, as the boot protocol says');
  assert.equal(bzImagePayload(bzImage({ payloadOffset: 0, payload: xz }))?.format, 'xz');
  // What is not one: an old boot protocol, no header, a payload past the end, an unknown compression.
  assert.equal(bzImagePayload(bzImage({ version: 0x207, payloadOffset: 0, payload: xz })), null);
  assert.equal(bzImagePayload(Buffer.alloc(4096)), null);
  const cut = bzImage({ payloadOffset: 0, payload: xz });
  cut.writeUInt32LE(1 << 30, 0x24c);
  assert.equal(bzImagePayload(cut), null);
  assert.equal(bzImagePayload(bzImage({ payloadOffset: 0, payload: Buffer.from('BZh91AY&SY') })), null);
});

/** A 64-bit x86 ELF with one PT_NOTE segment holding `notes` (name, type, desc). */
function elf(notes: Array<{ name: string; type: number; desc: Buffer }>, machine = 62): Buffer {
  const body = Buffer.concat(
    notes.map((n) => {
      const name = Buffer.from(n.name + '\0');
      const pad = (b: Buffer): Buffer => Buffer.concat([b, Buffer.alloc((4 - (b.length % 4)) % 4)]);
      const head = Buffer.alloc(12);
      head.writeUInt32LE(name.length, 0);
      head.writeUInt32LE(n.desc.length, 4);
      head.writeUInt32LE(n.type, 8);
      return Buffer.concat([head, pad(name), pad(n.desc)]);
    }),
  );
  const eh = Buffer.alloc(64);
  eh.writeUInt32BE(0x7f454c46, 0);
  eh[4] = 2;
  eh[5] = 1;
  eh.writeUInt16LE(machine, 18);
  eh.writeBigUInt64LE(64n, 32);
  eh.writeUInt16LE(56, 54);
  eh.writeUInt16LE(2, 56);
  const load = Buffer.alloc(56);
  load.writeUInt32LE(1, 0);
  const note = Buffer.alloc(56);
  note.writeUInt32LE(4, 0);
  note.writeBigUInt64LE(BigInt(64 + 112), 8);
  note.writeBigUInt64LE(BigInt(body.length), 32);
  return Buffer.concat([eh, load, note, body]);
}

test('a PVH entry is Xen’s PHYS32_ENTRY note, found among others', () => {
  const entry = Buffer.from([0x50, 0x08, 0x00, 0x01]);
  assert.equal(
    hasPvhEntry(
      elf([
        { name: 'Linux', type: 6, desc: Buffer.from('6.1.0\0') },
        { name: 'Xen', type: 18, desc: entry },
      ]),
    ),
    true,
  );
  assert.equal(hasPvhEntry(elf([{ name: 'Xen', type: 17, desc: entry }])), false, 'another Xen note');
  assert.equal(hasPvhEntry(elf([{ name: 'GNU', type: 18, desc: entry }])), false, 'another owner');
  assert.equal(hasPvhEntry(elf([{ name: 'Xen', type: 18, desc: entry }], 183)), false, 'not x86-64');
  assert.equal(hasPvhEntry(Buffer.from('not an elf at all, just text and more text to be long enough for a header.')), false);
  const cut = elf([{ name: 'Xen', type: 18, desc: entry }]);
  assert.equal(hasPvhEntry(cut.subarray(0, cut.length - 8)), false, 'a note segment past the end');
});
