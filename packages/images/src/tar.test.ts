import { test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { Worker } from 'node:worker_threads';
import { readTar, type TarEntry } from './tar.js';
import { base256, extended, member, octal, paxRecord, tarCase, type FuzzJob, type FuzzReport } from './tar-fuzz.js';

/**
 * Runs a job of the tar fuzzer in a worker thread, ending it when one case takes longer than
 * `stallMs`: a reader that spins in microtasks starves its own thread's timers, not this one's.
 */
async function guarded(job: Omit<FuzzJob, 'progress'>, stallMs: number): Promise<FuzzReport> {
  const progress = new SharedArrayBuffer(4);
  const at = new Int32Array(progress);
  const w = new Worker(new URL('./tar-fuzz.js', import.meta.url), { workerData: { tarFuzz: { ...job, progress } } });
  try {
    return await new Promise<FuzzReport>((resolve, reject) => {
      let seen = 0;
      let since = performance.now();
      const watch = setInterval(() => {
        const now = Atomics.load(at, 0);
        if (now !== seen) {
          seen = now;
          since = performance.now();
        } else if (now > 0 && performance.now() - since > stallMs) {
          clearInterval(watch);
          const input = job.cases ? Buffer.from(job.cases[now - 1]?.bytes ?? []) : tarCase(job.seed, now - 1).bytes;
          reject(
            new Error(
              `case ${now - 1} (seed ${job.seed}) did not end within ${stallMs} ms; its first bytes (base64): ${input.subarray(0, 1024).toString('base64')}`,
            ),
          );
        }
      }, 25);
      w.once('message', (r: FuzzReport) => {
        clearInterval(watch);
        resolve(r);
      });
      w.once('error', (e) => {
        clearInterval(watch);
        reject(e);
      });
    });
  } finally {
    await w.terminate();
  }
}

/** Given inputs through the guarded reader: the outcome of each, or the case that broke a property. */
async function outcomes(cases: NonNullable<FuzzJob['cases']>, caseMs = 2000): Promise<FuzzReport['outcomes']> {
  const r = await guarded({ seed: 0, seconds: 0, cases, caseMs }, caseMs + 1000);
  assert.ok(!r.finding, r.finding && `case ${r.finding.index}: ${r.finding.message}`);
  return r.outcomes;
}

const END = Buffer.alloc(1024);
const file = (name: string, body: string, size: string | Buffer = octal(Buffer.byteLength(body), 12)): Buffer =>
  member({ name, flag: '0', size }, Buffer.from(body));

/** The audit's probe (W3-01): a PAX `size=1.5`, one file, the end marker. */
export const FRACTIONAL_SIZE = Buffer.concat([extended('x', paxRecord('size', '1.5')), file('f', 'A'), END]);

test('PAX numbers that are not whole numbers within 2^53 are refused at once, never spun on (W3-01)', async () => {
  const bad = ['1.5', '0.5', '-1', '1e3', '0x10', ' 12', '12 ', '', '+5', '9007199254740993', 'NaN', 'Infinity'];
  const cases = [
    ...bad.map((v) => Buffer.concat([extended('x', paxRecord('size', v)), file('f', 'AB'), END])),
    ...['uid', 'gid'].flatMap((k) => ['1.5', '-1', 'abc', '1e3'].map((v) => Buffer.concat([extended('x', paxRecord(k, v)), file('f', 'AB'), END]))),
    Buffer.concat([extended('x', paxRecord('mtime', 'yesterday')), file('f', 'AB'), END]),
    // In a global header, which applies to every member after it.
    Buffer.concat([extended('g', paxRecord('size', '1.5')), file('f', 'AB'), END]),
  ];
  const got = await outcomes(cases.map((bytes) => ({ bytes })));
  got.forEach((o, i) => assert.match(o.error ?? 'accepted', /^not a valid tar archive: PAX (size|uid|gid|mtime)=/, `case ${i}`));
});

test('octal and base-256 header numbers are checked as PAX ones are', async () => {
  const cases = [
    file('f', 'A', '0000001.5\0'),
    file('f', 'A', '-0000001\0'),
    file('f', 'A', '00000008\0'),
    file('f', 'A', base256(2n ** 60n)),
    file('f', 'A', Buffer.concat([Buffer.from([0xff]), Buffer.alloc(11, 0xff)])), // base-256 -1
  ].map((b) => ({ bytes: Buffer.concat([b, END]) }));
  for (const [i, o] of (await outcomes(cases)).entries()) assert.match(o.error ?? 'accepted', /size is (not an octal number|too large|negative)/, `case ${i}`);
});

async function entries(tar: Buffer, chunk = 100): Promise<Array<TarEntry & { body: string }>> {
  const out: Array<TarEntry & { body: string }> = [];
  const parts = Array.from({ length: Math.ceil(tar.length / chunk) }, (_, i) => tar.subarray(i * chunk, (i + 1) * chunk));
  await readTar(Readable.from(parts), async (e, body) => {
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(c);
    out.push({ ...e, body: Buffer.concat(chunks).toString() });
  });
  return out;
}

test('what real archives write still reads: PAX sizes, fractional and negative times, base-256 sizes, GNU long names', async () => {
  const tar = Buffer.concat([
    extended('x', paxRecord('size', '5') + paxRecord('mtime', '1700000000.987654321') + paxRecord('uid', '4294967294')),
    file('a', 'hello', octal(0, 12)),
    extended('x', paxRecord('mtime', '-1.5') + paxRecord('LIBARCHIVE.xattr.user.caf%C3%A9', 'dg==')),
    file('b', ''),
    extended('L', `${'long/'.repeat(40)}name`),
    file('c', 'xyz', base256(3n)),
    extended('g', paxRecord('comment', 'c'.repeat(100_000)) + paxRecord('SCHILY.xattr.user.all', 'g')),
    member({ name: 'd', flag: '2', size: octal(0, 12), linkname: 'a' }),
    END,
  ]);
  const e = await entries(tar);
  assert.deepEqual(
    e.map((x) => [x.path, x.type, x.size, x.mtime, x.uid, x.body]),
    [
      ['a', 'file', 5, 1700000000, 4294967294, 'hello'],
      ['b', 'file', 0, -2, 1000, ''],
      [`${'long/'.repeat(40)}name`, 'file', 3, 1700000000, 1000, 'xyz'],
      ['d', 'symlink', 0, 1700000000, 1000, ''],
    ],
  );
  assert.equal(e[1]?.xattrs.get('user.café')?.toString(), 'v');
  assert.equal(e[3]?.xattrs.get('user.all')?.toString(), 'g');
});

test('a member other than a file that declares data is refused before any of it is read (W3-07)', async () => {
  const GiB = 2 ** 30;
  const cases = ['1', '2', '3', '4', '5', '6'].flatMap((flag) => [
    // Octal, base-256 and PAX sizes, the declared body following (made as it is read).
    { bytes: Buffer.concat([file('first', 'abc'), member({ name: 'x', flag, size: octal(GiB, 12), linkname: 'first' })]), tail: GiB },
    { bytes: member({ name: 'x', flag, size: base256(BigInt(GiB)), linkname: 'first' }), tail: GiB },
    { bytes: Buffer.concat([extended('x', paxRecord('size', String(GiB))), member({ name: 'x', flag, size: octal(0, 12), linkname: 'first' })]), tail: GiB },
  ]);
  for (const [i, o] of (await outcomes(cases, 1000)).entries()) assert.match(o.error ?? 'accepted', /declares 1073741824 bytes of data/, `case ${i}`);
});

test('a large extended header arriving in small chunks is joined once, not once per chunk', async () => {
  // 8 MiB of PAX records in 8 KiB chunks: rejoined on every chunk that is ~4 GiB of copying.
  const big = paxRecord('comment', 'c'.repeat((8 << 20) - 40));
  const bytes = Buffer.concat([extended('x', big), file('f', 'ok'), END]);
  const long = Buffer.concat([extended('L', 'n/'.repeat(4 << 20)), file('f', 'ok'), END]);
  const got = await outcomes(
    [
      { bytes, chunkBytes: 8 << 10 },
      { bytes: long, chunkBytes: 8 << 10 },
      // 1 MiB of header in 8-byte chunks (a socket a sender trickles into): 131,072 parts
      // dropped from the front one by one were 131,072 copies of the list, over a minute.
      { bytes: Buffer.concat([extended('x', paxRecord('comment', 'c'.repeat((1 << 20) - 40))), file('f', 'ok'), END]), chunkBytes: 8 },
    ],
    1500,
  );
  assert.deepEqual(
    got.map((o) => o.entries),
    [1, 1, 1],
  );
});

test('fuzz: seeded hostile and mutated tars always end in entries or invalid_argument, in bounded time and memory', async () => {
  const seconds = Number(process.env.WARREN_TAR_FUZZ_SECONDS ?? 3);
  const seed = Number(process.env.WARREN_TAR_FUZZ_SEED ?? 0x7a4);
  const r = await guarded({ seed, seconds, caseMs: 2000 }, 3000);
  assert.ok(!r.finding, r.finding && `case ${r.finding.index} of seed ${seed}: ${r.finding.message}; its first bytes (base64): ${r.finding.input}`);
  // Both outcomes are exercised: a fuzzer whose every case is refused tests only the first check.
  assert.ok(r.cases > 300, `only ${r.cases} cases ran`);
  assert.ok(r.refused > r.cases / 10 && r.refused < r.cases * 0.9, `${r.refused} of ${r.cases} refused`);
  assert.ok(r.entries > r.cases / 2, `${r.entries} entries in ${r.cases} cases`);
});
