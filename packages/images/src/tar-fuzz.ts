import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { WarrenError } from '@warren/api';
import { MAX_EXTENDED_HEADER_BYTES, readTar, type TarEntry } from './tar.js';

/*
 * A deterministic, seeded mutation fuzzer of the tar reader (tar.test.ts runs it, in a worker
 * thread the test can end: a reader that spins in microtasks never lets a timer of its own thread
 * fire). Each case is a tar built from random members (PAX and global PAX records, GNU long names,
 * base-256 and octal numbers, hostile values among them), then mutated byte by byte, cut short or
 * not, and fed in chunks of random sizes. The reader must yield entries that make sense or throw
 * an invalid_argument WarrenError, within a time bound, never holding much more than its largest
 * extended header.
 */

/** A small fast PRNG (mulberry32): the same seed gives the same cases. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One input: the bytes, how they are cut into chunks, and maybe a long body that follows them. */
export interface TarCase {
  bytes: Buffer;
  /** Seed of the chunk sizes the source cuts `bytes` into. */
  chunkSeed: number;
  /** Or the one size of them all. */
  chunkBytes?: number;
  /** When set: this many bytes of a member's body follow `bytes` (made as they are read), then an end marker. */
  tail?: number;
  /** Whether the handler reads every body whole (else it may leave some for the reader to skip). */
  readBodies: boolean;
  /** For a well-formed case: how many members and bytes of bodies it must yield. */
  expect?: { entries: number; bodyBytes: number };
}

const BLOCK = 512;

/** A ustar header; numbers are given as the text of their field, or as base-256 bytes. */
export function tarHeader(f: {
  name: string;
  flag: string;
  size: string | Buffer;
  mode?: string;
  uid?: string | Buffer;
  mtime?: string;
  linkname?: string;
  prefix?: string;
  magic?: string;
}): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = (v: string | Buffer, at: number, len: number): void => {
    (typeof v === 'string' ? Buffer.from(v, 'latin1') : v).copy(h, at, 0, len);
  };
  put(Buffer.from(f.name, 'utf8'), 0, 100);
  put(f.mode ?? '0000644\0', 100, 8);
  put(f.uid ?? '0001750\0', 108, 8);
  put('0001750\0', 116, 8);
  put(f.size, 124, 12);
  put(f.mtime ?? octal(1_700_000_000, 12), 136, 12);
  put(f.flag, 156, 1);
  put(f.linkname ?? '', 157, 100);
  put(f.magic ?? 'ustar\x0000', 257, 8);
  put(f.prefix ?? '', 345, 155);
  return setChecksum(h);
}

/** Writes a header block's checksum field from its bytes. */
export function setChecksum(h: Buffer, at = 0): Buffer {
  h.fill(0x20, at + 148, at + 156);
  let sum = 0;
  for (let i = at; i < at + BLOCK; i++) sum += h[i] ?? 0;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', at + 148, 'latin1');
  return h;
}

/** Octal text of a header number field of `len` bytes. */
export const octal = (v: number, len: number): string => v.toString(8).padStart(len - 1, '0') + '\0';

/** GNU base-256 bytes of a `len`-byte field (the value cut to what the field holds). */
export function base256(v: bigint, len = 12): Buffer {
  const b = Buffer.alloc(len);
  for (let i = len - 1; i >= 1; i--, v >>= 8n) b[i] = Number(v & 0xffn);
  b[0] = 0x80 | Number(v & 0x7fn);
  return b;
}

/** One PAX record, its length prefix right. */
export function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

const pad = (b: Buffer): Buffer => Buffer.concat([b, Buffer.alloc((BLOCK - (b.length % BLOCK)) % BLOCK)]);

/** A header and its body, padded. */
export function member(h: Parameters<typeof tarHeader>[0], body: Buffer = Buffer.alloc(0)): Buffer {
  return Buffer.concat([tarHeader(h), pad(body)]);
}

/** An extended header (x, g, L or K) holding `data`. */
export function extended(flag: 'x' | 'g' | 'L' | 'K', data: string): Buffer {
  const b = Buffer.from(data, 'utf8');
  return member({ name: flag === 'x' || flag === 'g' ? 'PaxHeader' : '././@LongLink', flag, size: octal(b.length, 12) }, b);
}

const HOSTILE_NUMBERS = [
  '1.5',
  '0.5',
  '-1',
  '1e3',
  '0x10',
  ' 12',
  '12 ',
  '',
  '9007199254740993',
  '+5',
  '\u0663',
  'NaN',
  'Infinity',
  '00',
  '1.',
  '99999999999999999999',
  '0',
];
const HOSTILE_OCTAL = ['77777777777\0', '\0\0\0\0\0\0\0\0\0\0\0\0', '        ', '0000001.5\0', '-0000001\0', '0x0000010\0', '8\0', '   7 \0'];
const PAX_KEYS = ['size', 'uid', 'gid', 'mtime', 'path', 'linkpath', 'comment', 'SCHILY.xattr.user.k', 'LIBARCHIVE.xattr.user.ok', 'atime'];
const FLAGS = ['0', '0', '0', '\0', '7', '1', '2', '3', '4', '5', '5', '6'];
const ODD_FLAGS = ['x', 'g', 'L', 'K', 'S', 'D', 'V', 'Z'];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

/** A random PAX record; the more hostile `w` (0 to 1), the likelier a bad value or a broken record. */
function randomRecord(r: () => number, w: number): string {
  // A size record describes one member: only a hostile case has one at random.
  const key = r() < 0.1 * w ? 'LIBARCHIVE.xattr.user.%zz' : pick(r, w > 0 ? PAX_KEYS : PAX_KEYS.slice(1));
  const value =
    key === 'path' || key === 'linkpath'
      ? 'p/'.repeat(Math.floor(r() * 80)) + 'x'
      : key === 'comment'
        ? 'c'.repeat(Math.floor(r() * 3000))
        : key === 'mtime' && r() < 0.5
          ? pick(r, ['1700000000.123456789', '-1.5', '-0.000000001', '1700000000.'])
          : key.startsWith('LIBARCHIVE') || key.startsWith('SCHILY')
            ? 'dmFsdWU='
            : r() < 0.4 * w
              ? pick(r, HOSTILE_NUMBERS)
              : String(key === 'size' ? Math.floor(r() * 1500) : Math.floor(r() * 70000));
  const rec = paxRecord(key, value);
  if (r() >= 0.2 * w) return rec;
  // Broken records: a wrong length, no newline, no '=', a length that is not digits.
  return pick(r, [
    rec.replace(/^\d+/, (d) => String(Number(d) + 3)),
    rec.slice(0, -1),
    rec.replace('=', ':'),
    rec.replace(/^\d+/, '+$&'),
    `0 ${key}=\n`,
    `99999999 ${key}=x\n`,
    rec.replace(/^\d+/, ' $&'),
  ]);
}

/** A random archive, hostile as `w` (0 to 1) says; the offsets of its header blocks. */
function randomTar(r: () => number, w: number): { bytes: Buffer; headers: number[]; entries: number; bodyBytes: number } {
  const parts: Buffer[] = [];
  const headers: number[] = [];
  let at = 0;
  const add = (b: Buffer): void => {
    headers.push(at);
    parts.push(b);
    at += b.length;
  };
  const odd = (p: number): boolean => r() < p * w;
  const n = 1 + Math.floor(r() * 6);
  let bodyBytes = 0;
  for (let i = 0; i < n; i++) {
    const flag = odd(0.1) ? pick(r, ODD_FLAGS) : pick(r, FLAGS);
    const isFile = flag === '0' || flag === '\0' || flag === '7';
    const len = isFile || odd(0.2) ? Math.floor(r() * 1500) : 0;
    bodyBytes += len;
    const records = r() < 0.3 ? Array.from({ length: 1 + Math.floor(r() * 4) }, () => randomRecord(r, w)) : [];
    const global = records.length > 0 && r() < 0.2;
    // A file's size in a PAX record, its header's 0 (as tar writes one of 8 GiB or more).
    const paxSize = !global && isFile && r() < 0.3;
    if (paxSize) records.push(paxRecord('size', String(len)));
    if (records.length) add(extended(global ? 'g' : 'x', records.join('')));
    if (r() < 0.15) add(extended(r() < 0.7 ? 'L' : 'K', 'long/'.repeat(30 + Math.floor(r() * 30)) + 'name'));
    const size = paxSize
      ? octal(0, 12)
      : !odd(0.2)
        ? r() < 0.9
          ? octal(len, 12)
          : base256(BigInt(len))
        : r() < 0.5
          ? pick(r, HOSTILE_OCTAL)
          : base256(BigInt(Math.floor(r() * 2 ** 20)) << BigInt(Math.floor(r() * 80)));
    const h = {
      name: r() < 0.1 ? 'n'.repeat(100) : `dir${i}/file${i}`,
      flag,
      size,
      linkname: flag === '1' || flag === '2' ? `dir${i}/file0` : '',
      prefix: r() < 0.1 ? 'some/prefix' : '',
      magic: r() < 0.1 ? 'ustar  \0' : undefined,
      mode: odd(0.1) ? pick(r, HOSTILE_OCTAL).slice(0, 8) : undefined,
      uid: r() < 0.1 ? base256(BigInt(Math.floor(r() * 2 ** 20)) << BigInt(odd(0.5) ? Math.floor(r() * 40) : 0), 8) : undefined,
      mtime: odd(0.1) ? pick(r, HOSTILE_OCTAL) : undefined,
    };
    // A body of the length the header says, or (cut short) of what it happens to be.
    add(member(h, Buffer.alloc(odd(0.1) ? Math.floor(r() * 2000) : len, 0x61 + i)));
  }
  const end = r();
  if (end < 0.7) add(Buffer.alloc(1024));
  else if (end < 0.8) add(Buffer.alloc(512));
  return { bytes: Buffer.concat(parts), headers, entries: n, bodyBytes };
}

/** Byte-level mutations (flips, interesting values, inserts, deletes, a cut), checksums mostly redone. */
function mutate(r: () => number, bytes: Buffer, headers: number[], w: number): Buffer {
  let b = Buffer.from(bytes);
  const k = Math.floor(r() * 5 * w);
  for (let i = 0; i < k && b.length; i++) {
    const at = Math.floor(r() * b.length);
    const op = r();
    if (op < 0.4) b[at] = (b[at] ?? 0) ^ (1 << Math.floor(r() * 8));
    else if (op < 0.7) b[at] = pick(r, [0, 0x80, 0xff, 0x30, 0x37, 0x20, 0x2e, 0x2d, 0x0a, 0x3d]);
    else if (op < 0.8) b = Buffer.concat([b.subarray(0, at), Buffer.from([Math.floor(r() * 256)]), b.subarray(at)]);
    else if (op < 0.9) b = Buffer.concat([b.subarray(0, at), b.subarray(at + 1 + Math.floor(r() * 600))]);
    else b = b.subarray(0, at);
  }
  if (r() < 0.85) for (const h of headers) if (h + BLOCK <= b.length && b.subarray(h, h + BLOCK).some((x) => x !== 0)) setChecksum(b, h);
  return b;
}

/** Case `i` of the run seeded `seed`: the same pair always gives the same case. */
export function tarCase(seed: number, i: number): TarCase {
  const r = rng((Math.imul(seed, 0x9e3779b1) ^ i) >>> 0);
  if (r() < 0.02) return longMemberCase(r);
  // A third of the cases are well formed (bar the odd record): what they hold must come out right.
  const w = r() < 0.35 ? 0 : r();
  const { bytes, headers, entries, bodyBytes } = randomTar(r, w);
  return {
    bytes: mutate(r, bytes, headers, w),
    chunkSeed: Math.floor(r() * 2 ** 32),
    readBodies: r() < 0.7,
    expect: w === 0 ? { entries, bodyBytes } : undefined,
  };
}

/** A member of any type declaring megabytes (octal, base-256 or PAX), its body following. */
function longMemberCase(r: () => number): TarCase {
  // Mostly under a MiB; some over what the reader may hold (its largest extended header).
  const tail = r() < 0.3 ? MAX_EXTENDED_HEADER_BYTES + (1 << 20) + Math.floor(r() * (4 << 20)) : 1 + Math.floor(r() * (1 << 20));
  const flag = pick(r, ['0', '1', '2', '3', '4', '5', '6']);
  const how = r();
  const lead = how < 0.4 ? extended('x', paxRecord('size', String(tail))) : Buffer.alloc(0);
  const size = how < 0.4 ? octal(0, 12) : how < 0.7 ? octal(tail, 12) : base256(BigInt(tail));
  return {
    bytes: Buffer.concat([
      member({ name: 'first', flag: '0', size: octal(3, 12) }, Buffer.from('abc')),
      lead,
      tarHeader({ name: 'big', flag, size, linkname: 'first' }),
    ]),
    chunkSeed: 1,
    tail,
    readBodies: true,
  };
}

/** What one case did, for the statistics of a run. */
export interface CaseOutcome {
  entries: number;
  error?: string;
}

/** A case broke a property of the reader: what, and the case (base64) to replay it. */
export class TarFinding extends Error {}

/** The most a source may have handed the reader beyond what it has passed on: its largest extended header, a chunk, slack. */
const HELD_BOUND = MAX_EXTENDED_HEADER_BYTES + (64 << 10) + 4 * BLOCK;
const TAIL_CHUNK = Buffer.alloc(64 << 10, 0x62);

const safe = (v: number): boolean => Number.isSafeInteger(v);

/** Runs one case through readTar and checks what came out (see the file's comment). */
export async function runCase(c: TarCase): Promise<CaseOutcome> {
  let pulled = 0;
  let passed = 0; // bytes the reader is known to have passed on (an entry's offset, its body)
  const hash = createHash('sha256');
  const chunkR = rng(c.chunkSeed);
  const held = (): void => {
    if (pulled - passed > HELD_BOUND) throw new TarFinding(`the reader holds ${pulled - passed} bytes`);
  };
  async function* source(): AsyncGenerator<Buffer> {
    for (let at = 0; at < c.bytes.length; ) {
      const n = c.chunkBytes ?? 1 + Math.floor(chunkR() * (chunkR() < 0.5 ? 16 : 8192));
      const b = c.bytes.subarray(at, at + n);
      at += b.length;
      pulled += b.length;
      hash.update(b);
      held();
      yield b;
    }
    if (c.tail === undefined) return;
    for (let left = c.tail; left > 0; ) {
      const b = TAIL_CHUNK.subarray(0, Math.min(left, TAIL_CHUNK.length));
      left -= b.length;
      pulled += b.length;
      hash.update(b);
      held();
      yield b;
    }
    const end = Buffer.alloc(((BLOCK - (c.tail % BLOCK)) % BLOCK) + 1024);
    pulled += end.length;
    hash.update(end);
    yield end;
  }
  let entries = 0;
  let bodyBytes = 0;
  const check = (ok: boolean, what: string, e: TarEntry): void => {
    if (!ok) throw new TarFinding(`${what}: ${JSON.stringify({ ...e, xattrs: [...e.xattrs.keys()] })}`);
  };
  try {
    const res = await readTar(source(), async (e, body) => {
      entries++;
      check(typeof e.path === 'string' && typeof e.linkname === 'string', 'path', e);
      check([e.mode, e.uid, e.gid, e.mtime, e.devmajor, e.devminor].every(safe), 'a number is not a safe integer', e);
      check(safe(e.size) && e.size >= 0 && (e.type === 'file' || e.size === 0), 'size', e);
      check(safe(e.offset) && e.offset % BLOCK === 0 && e.offset >= passed, 'offset', e);
      passed = e.offset;
      let got = 0;
      for await (const chunk of body) {
        check(chunk.length > 0, 'an empty body chunk', e);
        got += chunk.length;
        passed += chunk.length;
        bodyBytes += chunk.length;
        if (!c.readBodies && got > 100) return;
      }
      check(got === e.size, `a body of ${got} bytes`, e);
    });
    if (res.entries !== entries) throw new TarFinding(`readTar counted ${res.entries} entries, the handler saw ${entries}`);
    if (res.bytes !== pulled || res.digest !== `sha256:${hash.digest('hex')}`) throw new TarFinding('the digest is not of the bytes read');
    if (c.expect && (entries !== c.expect.entries || (c.readBodies && bodyBytes !== c.expect.bodyBytes)))
      throw new TarFinding(`a well-formed archive of ${c.expect.entries} members (${c.expect.bodyBytes} bytes) read as ${entries} (${bodyBytes} bytes)`);
    return { entries };
  } catch (e) {
    if (e instanceof TarFinding) throw e;
    if (!(e instanceof WarrenError) || e.code !== 'invalid_argument')
      throw new TarFinding(`threw ${e instanceof WarrenError ? e.code : String(e)}`, { cause: e });
    if (c.expect) throw new TarFinding(`a well-formed archive was refused: ${e.message}`);
    return { entries, error: e.message };
  }
}

/** runCase, within `maxMs` (a case that ends but too slowly is a finding too). */
async function timedCase(c: TarCase, maxMs: number): Promise<CaseOutcome> {
  const start = performance.now();
  const o = await runCase(c);
  const ms = performance.now() - start;
  if (ms > maxMs) throw new TarFinding(`took ${Math.round(ms)} ms`);
  return o;
}

/** What a worker is asked to do: `cases` given, or fuzz cases of `seed` for `seconds`. */
export interface FuzzJob {
  seed: number;
  seconds: number;
  /** The first case to run (to go on past a finding). */
  from?: number;
  cases?: Array<{ bytes: Uint8Array; tail?: number; chunkBytes?: number }>;
  caseMs: number;
  /** Written by the worker: [index of the case it is on + 1]. */
  progress: SharedArrayBuffer;
}

/** What a worker answers when done. */
export interface FuzzReport {
  cases: number;
  refused: number;
  entries: number;
  /** The outcome of each given case, in order (for a run of `cases`). */
  outcomes: CaseOutcome[];
  finding?: { index: number; message: string; input: string };
}

async function work(job: FuzzJob): Promise<FuzzReport> {
  const progress = new Int32Array(job.progress);
  const report: FuzzReport = { cases: 0, refused: 0, entries: 0, outcomes: [] };
  const end = performance.now() + job.seconds * 1000;
  for (let i = job.from ?? 0; job.cases ? i < job.cases.length : performance.now() < end; i++) {
    const given = job.cases?.[i];
    const c: TarCase = given
      ? { bytes: Buffer.from(given.bytes), tail: given.tail, chunkBytes: given.chunkBytes, chunkSeed: i, readBodies: true }
      : tarCase(job.seed, i);
    Atomics.store(progress, 0, i + 1);
    try {
      const o = await timedCase(c, job.caseMs);
      if (job.cases) report.outcomes.push(o);
      report.cases++;
      report.entries += o.entries;
      if (o.error) report.refused++;
    } catch (e) {
      return { ...report, finding: { index: i, message: (e as Error).message.slice(0, 2000), input: c.bytes.subarray(0, 1024).toString('base64') } };
    }
  }
  return report;
}

if (!isMainThread && parentPort && (workerData as { tarFuzz?: FuzzJob } | null)?.tarFuzz) {
  const port = parentPort;
  void work((workerData as { tarFuzz: FuzzJob }).tarFuzz).then((r) => port.postMessage(r));
}
