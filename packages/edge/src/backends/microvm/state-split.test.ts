import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { splitRamBlock } from './state-split.js';

const PAGE = 4096;

/** A migration stream as QEMU 7.2 writes one with x-ignore-shared: parts given as buffers. */
class Stream {
  parts: Buffer[] = [];
  raw(b: Buffer | number[]): this {
    this.parts.push(Buffer.from(b));
    return this;
  }
  be32(n: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return this.raw(b);
  }
  be64(n: bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(n);
    return this.raw(b);
  }
  name(s: string): this {
    return this.raw([s.length]).raw(Buffer.from(s, 'latin1'));
  }
  record(flags: number, addr: number, block: string | null, data: Buffer): this {
    this.be64(BigInt(addr) | BigInt(flags));
    if (block !== null) this.name(block);
    return this.raw(data);
  }
  footer(id: number): this {
    return this.raw([0x7e]).be32(id);
  }
  get bytes(): Buffer {
    return Buffer.concat(this.parts);
  }
}

const page = (fill: number): Buffer => Buffer.alloc(PAGE, fill);

/** A stream's header, `config`, and the ram section's start with its block list (name, bytes, guest address), before any page. */
function ramStart(config: Buffer, blocks: Array<[string, number, bigint]>): Stream {
  const st = new Stream().be32(0x5145564d).be32(3).raw(config).raw([0x01]).be32(2).name('ram').be32(0).be32(4);
  st.be64(BigInt(blocks.reduce((n, [, bytes]) => n + bytes, 0)) | 0x04n);
  for (const [name, bytes, gpa] of blocks) st.name(name).be64(BigInt(bytes)).be64(gpa);
  return st;
}

test('splitRamBlock: the block’s pages go to its file at their offsets, the rest of the state is kept as it was', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-split-'));
  try {
    const devices = Buffer.from([0x04, 0, 0, 0, 9, 5, ...Buffer.from('timer'), 0, 0, 0, 0, 0, 0, 0, 1, 0xaa, 0xbb, 0x7e, 0, 0, 0, 9, 0x00]);
    const config = Buffer.from([0x07, 0, 0, 0, 7, ...Buffer.from('microvm')]);
    // ram's start: the block list (each with its guest address), a page of each block, the end of the part.
    const input = ramStart(config, [
      ['microvm.ram', 4 * PAGE, 0n],
      ['bios', PAGE, 0xfff00000n],
    ])
      .record(0x08, 0, 'microvm.ram', page(1))
      .record(0x08 | 0x20, PAGE, null, page(2))
      .record(0x02 | 0x20, 2 * PAGE, null, Buffer.from([0]))
      .record(0x08, 0, 'bios', page(9))
      .be64(0x10n)
      .footer(2)
      // A part: a page of the block after the bios's, then the block continued (a filled page: its byte 7).
      .raw([0x02])
      .be32(2)
      .record(0x08, 3 * PAGE, 'microvm.ram', page(4))
      .record(0x02 | 0x20, 0, null, Buffer.from([7]))
      .be64(0x10n)
      .footer(2)
      .raw([0x03])
      .be32(2)
      .be64(0x10n)
      .footer(2)
      .raw(devices).bytes;
    await writeFile(join(dir, 'full'), input);
    const got = await splitRamBlock(join(dir, 'full'), 'microvm.ram', join(dir, 'state'), join(dir, 'ram'));
    assert.deepEqual(got, { pages: 5, bytes: 4 * PAGE });
    const ram = await readFile(join(dir, 'ram'));
    assert.equal(ram.length, 4 * PAGE);
    // Page 0 was written twice: last by the filled record.
    assert.deepEqual([ram[0], ram[PAGE], ram[2 * PAGE], ram[3 * PAGE]], [7, 2, 0, 4]);
    const expected = ramStart(config, [
      ['microvm.ram', 4 * PAGE, 0n],
      ['bios', PAGE, 0xfff00000n],
    ])
      .record(0x08, 0, 'bios', page(9))
      .be64(0x10n)
      .footer(2)
      .raw([0x02])
      .be32(2)
      .be64(0x10n)
      .footer(2)
      .raw([0x03])
      .be32(2)
      .be64(0x10n)
      .footer(2)
      .raw(devices).bytes;
    assert.deepEqual(await readFile(join(dir, 'state')), expected);
    assert.ok((await stat(join(dir, 'ram'))).size === 4 * PAGE);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('splitRamBlock: what it does not know fails the split (no half-understood state)', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-split-'));
  try {
    const start = (): Stream => ramStart(Buffer.alloc(0), [['microvm.ram', PAGE, 0n]]);
    const cases: Array<[string, Buffer, RegExp]> = [
      ['xbzrle', start().record(0x40, 0, 'microvm.ram', Buffer.alloc(8)).bytes, /does not know/],
      ['truncated', start().record(0x08, 0, 'microvm.ram', Buffer.alloc(100)).bytes, /ends early/],
      ['past the end', start().record(0x08, PAGE, 'microvm.ram', page(1)).bytes, /past its end/],
      ['not a stream', Buffer.from('hello world'), /not a QEMU migration stream/],
      ['no ram', new Stream().be32(0x5145564d).be32(3).raw(Buffer.alloc(40)).bytes, /no ram section/],
    ];
    for (const [what, bytes, error] of cases) {
      await writeFile(join(dir, 'full'), bytes);
      await assert.rejects(splitRamBlock(join(dir, 'full'), 'microvm.ram', join(dir, 'state'), join(dir, 'ram')), error, what);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
