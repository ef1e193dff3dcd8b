import { open, type FileHandle } from 'node:fs/promises';

/**
 * A saved microVM's state with one RAM block taken out into a file of its own: the block's pages
 * are written where they belong in `ramOut` (a sparse file of the block's size: zero pages stay
 * holes), and the state without them goes to `stateOut`. A QEMU whose RAM is `ramOut` mapped
 * copy-on-write then loads `stateOut` as a template's clone loads its template's state: its
 * memory is the file's until it writes. This is how a fork base is made of a microVM whose layers
 * are mapped into it (DAX): QEMU 7.2 can leave the shared layers out of a migration only by
 * leaving out all shared memory, and then takes no pages into a shared RAM file, so the base's RAM
 * cannot come in through a QEMU of its own.
 *
 * The state is QEMU 7.2's migration stream, saved with `x-ignore-shared` on and nothing else
 * (no compression, XBZRLE, multifd or postcopy): its header and configuration, the `ram`
 * section's start (the block list, then pages), its parts and its end, then the devices. What
 * precedes the `ram` section's start and what follows its end are copied byte for byte; the `ram`
 * records are read one by one, and anything this reader does not know fails the split (no state
 * is written half-understood).
 */
export async function splitRamBlock(stateIn: string, block: string, stateOut: string, ramOut: string): Promise<{ pages: number; bytes: number }> {
  const input = await open(stateIn, 'r');
  const out = await open(stateOut, 'w');
  const ram = await open(ramOut, 'w');
  try {
    const r = new Reader(input);
    const w = new Writer(out);
    const s = await split(r, w, block, ram);
    await w.flush();
    return s;
  } finally {
    await Promise.all([input.close(), out.close(), ram.close()]);
  }
}

const PAGE = 4096;
const FLAG = { zero: 0x02, memSize: 0x04, page: 0x08, eos: 0x10, continue: 0x20 } as const;
const SECTION = { start: 0x01, part: 0x02, end: 0x03, footer: 0x7e } as const;
const MAGIC = 0x5145564d;

async function split(r: Reader, w: Writer, block: string, ram: FileHandle): Promise<{ pages: number; bytes: number }> {
  if ((await r.be32()) !== MAGIC) throw new Error('not a QEMU migration stream');
  w.be32(MAGIC);
  // Up to the ram section's start: [START][id be32][3]"ram"[instance 0][version 4].
  const start = await r.copyUntil(
    w,
    (b, i) => b[i] === SECTION.start && b[i + 5] === 3 && b.toString('latin1', i + 6, i + 9) === 'ram' && b.readUInt32BE(i + 9) === 0,
    17,
  );
  if (!start) throw new Error('no ram section in the state');
  const head = await r.bytes(17);
  w.bytes(head);
  const sectionId = head.readUInt32BE(1);
  let size = 0;
  let pages = 0;
  let current: string | null = null;
  const records = async (): Promise<void> => {
    for (;;) {
      const word = await r.be64();
      const flags = Number(word & 0xfffn);
      const addr = word & ~0xfffn;
      if (flags & FLAG.memSize) {
        if (flags !== FLAG.memSize) throw new Error(`ram: flags ${flags} with the block list`);
        w.be64(word);
        for (let total = 0n; total < addr; ) {
          const name = await r.bytes(await r.byte());
          const length = await r.be64();
          const gpa = await r.be64(); // x-ignore-shared: each block's guest address
          w.byte(name.length);
          w.bytes(name);
          w.be64(length);
          w.be64(gpa);
          if (name.toString('latin1') === block) size = Number(length);
          total += length;
        }
        continue;
      }
      if (flags === FLAG.eos) {
        w.be64(word);
        return;
      }
      if (flags & ~(FLAG.zero | FLAG.page | FLAG.continue) || !(flags & (FLAG.zero | FLAG.page)) || (flags & FLAG.zero && flags & FLAG.page))
        throw new Error(`ram: a record this reader does not know (flags ${flags.toString(16)})`);
      let name: Buffer | null = null;
      if (!(flags & FLAG.continue)) {
        name = await r.bytes(await r.byte());
        current = name.toString('latin1');
      } else if (current === null) throw new Error('ram: a continued record with no block before it');
      const data = flags & FLAG.page ? await r.bytes(PAGE) : await r.bytes(1);
      if (current === block) {
        if (addr + BigInt(PAGE) > BigInt(size)) throw new Error(`ram: a page of ${block} past its end`);
        if (flags & FLAG.page) await ram.write(data, 0, PAGE, Number(addr));
        else if (data[0] !== 0) await ram.write(Buffer.alloc(PAGE, data[0]), 0, PAGE, Number(addr));
        pages++;
        continue;
      }
      // Another block's record: kept, naming its block (the one before it may have been dropped).
      w.be64(name ? word : word & ~BigInt(FLAG.continue));
      const id = Buffer.from(current, 'latin1');
      w.byte(id.length);
      w.bytes(id);
      w.bytes(data);
      if (w.full) await w.flush();
    }
  };
  await records();
  if (size === 0) throw new Error(`ram: no block ${block} in the state`);
  await ram.truncate(size);
  for (;;) {
    await footer(r, w, sectionId);
    const type = await r.byte();
    const id = await r.be32();
    if ((type !== SECTION.part && type !== SECTION.end) || id !== sectionId) throw new Error(`ram: section ${type} ${id} where its parts were`);
    w.byte(type);
    w.be32(id);
    await records();
    if (type === SECTION.end) break;
  }
  await footer(r, w, sectionId);
  // The devices, and the end of the stream: as they are.
  await r.copyRest(w);
  return { pages, bytes: size };
}

async function footer(r: Reader, w: Writer, sectionId: number): Promise<void> {
  const f = await r.byte();
  const id = await r.be32();
  if (f !== SECTION.footer || id !== sectionId) throw new Error('ram: a section without its footer');
  w.byte(f);
  w.be32(id);
}

/** Reads a file in 1 MiB chunks, bytes at a time as the parser asks. */
class Reader {
  private buf = Buffer.alloc(0);
  private pos = 0;
  private fileAt = 0;
  private eof = false;
  constructor(private readonly f: FileHandle) {}

  private async fill(n: number): Promise<void> {
    while (this.buf.length - this.pos < n && !this.eof) {
      const chunk = Buffer.alloc(1 << 20);
      const { bytesRead } = await this.f.read(chunk, 0, chunk.length, this.fileAt);
      this.fileAt += bytesRead;
      if (bytesRead === 0) this.eof = true;
      this.buf = Buffer.concat([this.buf.subarray(this.pos), chunk.subarray(0, bytesRead)]);
      this.pos = 0;
    }
    if (this.buf.length - this.pos < n) throw new Error('the state ends early');
  }

  async bytes(n: number): Promise<Buffer> {
    await this.fill(n);
    const b = Buffer.from(this.buf.subarray(this.pos, this.pos + n));
    this.pos += n;
    return b;
  }

  async byte(): Promise<number> {
    return (await this.bytes(1))[0]!;
  }

  async be32(): Promise<number> {
    return (await this.bytes(4)).readUInt32BE(0);
  }

  async be64(): Promise<bigint> {
    return (await this.bytes(8)).readBigUInt64BE(0);
  }

  /** Copies bytes to `w` until `at(buf, i)` holds at a position with `look` bytes readable from it; false at the end of the file. */
  async copyUntil(w: Writer, at: (b: Buffer, i: number) => boolean, look: number): Promise<boolean> {
    for (;;) {
      try {
        await this.fill(look);
      } catch {
        return false;
      }
      if (at(this.buf, this.pos)) return true;
      w.byte(this.buf[this.pos++]!);
    }
  }

  async copyRest(w: Writer): Promise<void> {
    for (;;) {
      w.bytes(this.buf.subarray(this.pos));
      this.pos = this.buf.length;
      if (this.eof) return;
      await w.flush();
      try {
        await this.fill(1);
      } catch {
        return;
      }
    }
  }
}

/** Buffers what is written and writes it out in order. */
class Writer {
  private parts: Buffer[] = [];
  private size = 0;
  private at = 0;
  constructor(private readonly f: FileHandle) {}

  bytes(b: Buffer): void {
    this.parts.push(Buffer.from(b));
    this.size += b.length;
  }

  byte(n: number): void {
    this.bytes(Buffer.from([n]));
  }

  be32(n: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    this.bytes(b);
  }

  be64(n: bigint): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(n);
    this.bytes(b);
  }

  async flush(): Promise<void> {
    const all = Buffer.concat(this.parts);
    this.parts = [];
    this.size = 0;
    await this.f.write(all, 0, all.length, this.at);
    this.at += all.length;
  }

  /** Written out once it holds a MiB. */
  get full(): boolean {
    return this.size >= 1 << 20;
  }
}
