/** Chunks this small are copied together (see ByteQueue); bigger ones are kept as they came. */
const SMALL_CHUNK = 1024;
/**
 * A slab's size: the first after the queue was empty is small (from Node's shared pool), each
 * next one twice the last, up to the largest. An emptied queue lets its slab go: every idle
 * sandbox's init connection holding a 64 KiB slab was 640 MiB outside V8's heap at 10,000
 * (counted against it, so more full collections as well).
 */
const FIRST_SLAB_BYTES = 2 * 1024;
const MAX_SLAB_BYTES = 64 * 1024;

/**
 * Bytes as they arrive from a stream: taking `n` of them copies only when they span chunks, and
 * then once. A frame decoder that joined everything held on each new chunk would copy a frame once
 * per piece it came in (a peer feeding a large frame a byte at a time makes that quadratic:
 * seconds of the event loop for a few kilobytes). Small chunks are copied into a shared slab as
 * they come, so that a peer sending a byte at a time costs a byte per byte, not a Buffer each.
 */
export class ByteQueue {
  private parts: Buffer[] = [];
  /** Index of the first part still held (parts before it are taken), and bytes of it taken. */
  private first = 0;
  private headOff = 0;
  private held = 0;
  private slab: Buffer | null = null;
  /** The slab's bytes not yet in `parts`: [slabStart, slabUsed), logically the last part. */
  private slabStart = 0;
  private slabUsed = 0;
  private nextSlabBytes = FIRST_SLAB_BYTES;

  /** Bytes held. */
  get length(): number {
    return this.held;
  }

  /** The size of the slab it keeps for small chunks (0: none; an empty queue keeps none). */
  get slabBytes(): number {
    return this.slab?.length ?? 0;
  }

  push(chunk: Buffer): void {
    const n = chunk.length;
    if (n === 0) return;
    this.held += n;
    if (n > SMALL_CHUNK) {
      this.seal();
      this.parts.push(chunk);
      return;
    }
    if (!this.slab || this.slabUsed + n > this.slab.length) {
      this.seal();
      this.slab = Buffer.allocUnsafe(this.nextSlabBytes);
      this.nextSlabBytes = Math.min(MAX_SLAB_BYTES, this.nextSlabBytes * 2);
      this.slabStart = this.slabUsed = 0;
    }
    if (n <= 16) for (let i = 0; i < n; i++) this.slab[this.slabUsed + i] = chunk[i]!;
    else chunk.copy(this.slab, this.slabUsed);
    this.slabUsed += n;
  }

  /** Puts the slab's open bytes into `parts` (the bytes after them go on into the same slab). */
  private seal(): void {
    if (!this.slab || this.slabUsed === this.slabStart) return;
    this.parts.push(this.slab.subarray(this.slabStart, this.slabUsed));
    this.slabStart = this.slabUsed;
  }

  /** The first `n` bytes held (there must be at least `n`), removed: a view when they are in one part, else one copy. */
  take(n: number): Buffer {
    if (n > this.held) throw new RangeError(`${n} bytes asked of ${this.held} held`);
    if (n === 0) return Buffer.alloc(0);
    this.seal();
    this.held -= n;
    const head = this.parts[this.first]!;
    if (head.length - this.headOff >= n) {
      const out = head.subarray(this.headOff, this.headOff + n);
      this.advance(head, n);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let got = 0;
    while (got < n) {
      const p = this.parts[this.first]!;
      const k = Math.min(p.length - this.headOff, n - got);
      p.copy(out, got, this.headOff, this.headOff + k);
      got += k;
      this.advance(p, k);
    }
    return out;
  }

  /**
   * The byte at `i` of what is held, or -1 past the end: a frame's header is read in place, with
   * no view made of it.
   */
  at(i: number): number {
    if (i >= this.held) return -1;
    this.seal();
    let off = this.headOff + i;
    for (let j = this.first; j < this.parts.length; j++) {
      const p = this.parts[j]!;
      if (off < p.length) return p[off]!;
      off -= p.length;
    }
    return -1;
  }

  /** Drops the first `n` bytes held (there must be at least `n`). */
  skip(n: number): void {
    if (n > this.held) throw new RangeError(`${n} bytes skipped of ${this.held} held`);
    this.seal();
    this.held -= n;
    while (n > 0) {
      const p = this.parts[this.first]!;
      const k = Math.min(p.length - this.headOff, n);
      this.advance(p, k);
      n -= k;
    }
  }

  /** Moves past `k` bytes of the first part `p`. */
  private advance(p: Buffer, k: number): void {
    this.headOff += k;
    if (this.headOff < p.length) return;
    this.headOff = 0;
    this.first++;
    // Taken parts are dropped in bulk: shifting the array for each would be quadratic too.
    if (this.first === this.parts.length) {
      this.parts = [];
      this.first = 0;
      // All taken: the slab goes too (views taken of it keep it as long as they need it).
      if (this.held === 0) {
        this.slab = null;
        this.slabStart = this.slabUsed = 0;
        this.nextSlabBytes = FIRST_SLAB_BYTES;
      }
    } else if (this.first >= 1024 && this.first * 2 >= this.parts.length) {
      this.parts = this.parts.slice(this.first);
      this.first = 0;
    }
  }
}
