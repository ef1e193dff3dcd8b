import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { http, settled, startTestWarren, type TestWarren } from './harness.js';
import { makeTar } from './tar-writer.js';

let source: TestWarren;
let node: TestWarren | undefined;
let store: Server;
let storeUrl = '';
/** Bytes the blob store served, by file name. */
const served = new Map<string, number>();
let storeDown = false;
/** The store answers every GET with the whole file, whatever range was asked for. */
let ignoreRanges = false;
/** The store changes one byte of every file of this kind it sends (`.data`, `.erofs`). */
let tamper: string | null = null;
/** Requests for a listing of the store (the on-demand view must never need one). */
let listings = 0;

/** A plain HTTP blob store over a directory: ranges, HEAD, no listings, counted bytes. */
function blobServer(dir: string): Server {
  return createServer((req, res) => {
    if (storeDown) {
      req.socket.destroy();
      return;
    }
    void (async () => {
      const name = decodeURIComponent((req.url ?? '/').split('?')[0] ?? '/').replace(/^\/+/, '');
      if (name === '') listings++;
      const st = name === '' || name.includes('/') ? null : await stat(join(dir, name)).catch(() => null);
      if (!st?.isFile()) {
        res.writeHead(404);
        res.end();
        return;
      }
      const m = ignoreRanges ? null : /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
      const start = m ? Number(m[1]) : 0;
      const end = m?.[2] ? Math.min(Number(m[2]), st.size - 1) : st.size - 1;
      res.writeHead(m ? 206 : 200, {
        'content-length': end - start + 1,
        'accept-ranges': 'bytes',
        'last-modified': st.mtime.toUTCString(),
        ...(m ? { 'content-range': `bytes ${start}-${end}/${st.size}` } : {}),
      });
      if (req.method === 'HEAD' || st.size === 0) {
        res.end();
        return;
      }
      served.set(name, (served.get(name) ?? 0) + (end - start + 1));
      let first = tamper !== null && name.endsWith(tamper);
      const flip = async function* (src: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
        for await (const c of src) {
          if (first && c.length) c[0] = (c[0] ?? 0) ^ 0xff;
          first = false;
          yield c;
        }
      };
      await pipeline(createReadStream(join(dir, name), { start, end }), flip, res).catch(() => undefined);
    })();
  });
}

const BIG = 32 << 20;
let big: Buffer;
let layerHex = '';
let baseDigest = '';
let layerDigest = '';

before(async () => {
  source = await startTestWarren({ images: ['busybox:latest'] });
  big = randomBytes(BIG);
  const tar = makeTar([
    { path: 'data/', type: 'dir' },
    { path: 'data/small.txt', content: 'small file\n' },
    { path: 'data/big.bin', content: big },
  ]);
  const up = await http(source, 'POST', '/v1/layers?name=data/big', tar, { 'content-type': 'application/x-tar' });
  assert.equal(up.status, 201, up.text);
  layerDigest = (up.json as { digest: string }).digest;
  layerHex = layerDigest.slice(7);
  baseDigest = (await source.client.images()).find((i) => i.name === 'busybox:latest')?.layers[0] ?? '';
  store = blobServer(join(source.dataDir, 'layers', 'blobs'));
  await new Promise<void>((r) => store.listen(0, '127.0.0.1', () => r()));
  storeUrl = `http://127.0.0.1:${(store.address() as AddressInfo).port}`;
});

after(async () => {
  await node?.close();
  await source?.close();
  store?.close();
});

const dataServed = (): number => served.get(`${layerHex}.data`) ?? 0;

/** Bytes served once read-ahead has stopped fetching (no change for a second: its threads may be starved a while on a busy machine). */
const settledServed = (): Promise<number> => settled(dataServed);

test('a layer the node lacks is mounted from the blob store and only the chunks read are fetched, once', async () => {
  node = await startTestWarren({ images: ['busybox:latest'], blobStore: { url: storeUrl, cacheMaxBytes: 1 << 30 } });
  const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent('od/app:1')}`, { layers: [baseDigest, layerDigest] });
  assert.equal(put.status, 200, put.text);
  // The metadata image is local now; no file data has moved.
  assert.ok((served.get(`${layerHex}.erofs`) ?? 0) > 0);
  await stat(join(node.dataDir, 'layers', 'blobs', `${layerHex}.erofs`));
  await assert.rejects(stat(join(node.dataDir, 'layers', 'blobs', `${layerHex}.data`)));
  assert.equal(dataServed(), 0);

  const sb = await node.client.sandboxes.create({ image: 'od/app:1' });
  // Path lookups and listings are metadata: still nothing fetched.
  assert.equal((await sb.exec('ls -la /data | wc -l; stat -c %s /data/big.bin')).stdout, `5\n${BIG}\n`);
  assert.equal(dataServed(), 0, 'metadata never goes remote');
  assert.equal((await sb.exec('cat /data/small.txt')).stdout, 'small file\n');
  assert.equal((await sb.exec('dd if=/data/big.bin bs=64k count=16 2>/dev/null | wc -c')).stdout.trim(), String(1 << 20));
  const first = await settledServed();
  // The blocks read, and two ahead of them once the reads ran in sequence.
  assert.ok(first > 0 && first <= 5 << 20, `read 1 MiB of 32, fetched ${first}`);
  assert.equal((await sb.exec('dd if=/data/big.bin bs=64k count=16 2>/dev/null | md5sum')).exitCode, 0);
  const other = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await other.exec('dd if=/data/big.bin bs=64k count=16 2>/dev/null | wc -c')).stdout.trim(), String(1 << 20));
  assert.equal(dataServed(), first, 'cached chunks are never fetched again');
  // The bytes are the layer's bytes.
  const want = (await readFile(join(source.dataDir, 'layers', 'blobs', `${layerHex}.data`))).length;
  assert.ok(want >= BIG);

  // The store goes away: reads it would serve fail in that sandbox; cached reads and everything else go on.
  storeDown = true;
  try {
    const lost = await sb.exec('dd if=/data/big.bin bs=1M skip=20 count=1 2>&1 >/dev/null; echo rc=$?', { timeoutMs: 120_000 });
    assert.match(lost.stdout, /rc=[1-9]/, lost.stdout);
    assert.equal((await other.exec('dd if=/data/big.bin bs=64k count=16 2>/dev/null | wc -c')).stdout.trim(), String(1 << 20));
    assert.equal((await other.exec('echo alive')).stdout, 'alive\n');
  } finally {
    storeDown = false;
  }
  await sb.delete();
  // A restart that keeps sandboxes keeps the on-demand view they read through, and reuses it.
  const keepDir = node.dataDir;
  await node.close({ keep: true });
  node = await startTestWarren({ dataDir: keepDir, images: ['busybox:latest'], blobStore: { url: storeUrl, cacheMaxBytes: 1 << 30 } });
  const again = await node.client.sandboxes.get(other.id);
  assert.equal(again.info.state, 'running');
  assert.equal((await again.exec('dd if=/data/big.bin bs=1M skip=24 count=2 2>/dev/null | wc -c')).stdout.trim(), String(2 << 20));
  assert.equal((await readFile('/proc/self/mounts', 'utf8')).split('\n').filter((l) => l.includes(`${keepDir}/mnt/remote`)).length, 1);
  await again.delete();
  const unknown = await http(node, 'PUT', `/v1/images/${encodeURIComponent('od/none:1')}`, { layers: [`sha256:${'0'.repeat(64)}`] });
  assert.equal(unknown.status, 404, unknown.text);

  // Stores that misbehave, on blocks nothing above has read or read ahead to (read-ahead only
  // goes forward, at most a few blocks past what a read touched: blocks 0-5 and 24-35 so far).
  const third = await node.client.sandboxes.create({ image: 'od/app:1' });
  const md5At = (mib: number): string =>
    createHash('md5')
      .update(big.subarray(mib << 20, (mib + 1) << 20))
      .digest('hex');
  const readAt = (mib: number): string => `dd if=/data/big.bin bs=1M skip=${mib} count=1 2>/dev/null | md5sum | cut -d' ' -f1`;
  const failsAt = async (mib: number): Promise<void> => {
    const r = await third.exec(`dd if=/data/big.bin bs=1M skip=${mib} count=1 2>&1 >/dev/null; echo rc=$?`, { timeoutMs: 120_000 });
    assert.match(r.stdout, /rc=[1-9]/, r.stdout);
  };
  // One that sends other bytes than the layer's: the block fails its digest, the read fails, and
  // nothing of it is kept; the true bytes are read once the store sends them.
  tamper = '.data';
  try {
    await failsAt(14);
  } finally {
    tamper = null;
  }
  assert.equal((await third.exec(readAt(14))).stdout.trim(), md5At(14));
  // One that answers a range request with the whole file: refused, not trusted.
  ignoreRanges = true;
  try {
    await failsAt(8);
  } finally {
    ignoreRanges = false;
  }
  assert.equal((await third.exec(readAt(8))).stdout.trim(), md5At(8));
  await third.delete();

  // The view's daemon is killed: the next start mounts a new one over the same cache, which serves
  // what was fetched before without the store (its lookups included).
  const pid = Number(await readFile(join(keepDir, 'cache', 'blobfs.pid'), 'utf8'));
  process.kill(pid, 'SIGKILL');
  for (let i = 0; i < 200 && (await stat(`/proc/${pid}`).catch(() => null)); i++) await new Promise((r) => setTimeout(r, 10));
  await node.close({ keep: true });
  // A block list the fetch was writing when the node died is swept at the next start.
  const torn = join(keepDir, 'layers', 'blobs', `${layerHex}.blocks.1.1.tmp`);
  await writeFile(torn, 'half');
  storeDown = true;
  try {
    node = await startTestWarren({ dataDir: keepDir, images: ['busybox:latest'], blobStore: { url: storeUrl, cacheMaxBytes: 1 << 30 } });
    await assert.rejects(stat(torn));
    const before = dataServed();
    const fourth = await node.client.sandboxes.create({ image: 'od/app:1' });
    assert.equal((await fourth.exec('dd if=/data/big.bin bs=1M skip=24 count=2 2>/dev/null | md5sum')).exitCode, 0);
    assert.equal((await fourth.exec('dd if=/data/big.bin bs=64k count=16 2>/dev/null | wc -c')).stdout.trim(), String(1 << 20));
    assert.equal(dataServed(), before);
    await fourth.delete();
  } finally {
    storeDown = false;
  }
  assert.equal(listings, 0, 'the store was never listed');
  await node.close();
  assert.doesNotMatch(await readFile('/proc/self/mounts', 'utf8'), new RegExp(keepDir));
  node = undefined;
});

test('over its limit, the cache lets go of layers no sandbox uses first; they are fetched again when needed', async () => {
  await node?.close().catch(() => undefined); // left by a test that failed
  // A second on-demand layer on the source node.
  const up = await http(source, 'POST', '/v1/layers?name=data/other', makeTar([{ path: 'other/big.bin', content: randomBytes(12 << 20) }]), {
    'content-type': 'application/x-tar',
  });
  assert.equal(up.status, 201, up.text);
  const otherDigest = (up.json as { digest: string }).digest;
  node = await startTestWarren({ images: ['busybox:latest'], blobStore: { url: storeUrl, cacheMaxBytes: 12 << 20 } });
  for (const [name, layers] of [
    ['od/app:1', [baseDigest, layerDigest]],
    ['od/other:1', [baseDigest, otherDigest]],
  ] as const) {
    const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent(name)}`, { layers });
    assert.equal(put.status, 200, put.text);
  }
  /** KiB of a layer's data in the node's cache (its cache file is sparse). */
  const cached = (digest: string): number =>
    Number(
      execFileSync('du', ['-k', join(node?.dataDir ?? '', 'cache', 'blobs', `${digest.slice(7)}.data`)])
        .toString()
        .split('\t')[0],
    );
  const read8 = (p: string): string => `dd if=${p} bs=1M count=8 2>/dev/null | wc -c`;
  const a = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await a.exec(read8('/data/big.bin'))).stdout.trim(), String(8 << 20));
  await a.delete();
  assert.doesNotMatch(
    await readFile('/proc/self/mountinfo', 'utf8'),
    new RegExp(`${node.dataDir}/mnt/layers/${layerHex}`),
    'the idle on-demand layer is unmounted',
  );
  assert.ok(cached(layerDigest) >= 8 * 1024, 'under the limit, nothing is evicted');
  // Another layer's reads push the cache over its limit: blocks of the unused layer go until the
  // cache is under it again, the layer in use keeps all of its blocks.
  const b = await node.client.sandboxes.create({ image: 'od/other:1' });
  assert.equal((await b.exec(read8('/other/big.bin'))).stdout.trim(), String(8 << 20));
  await settledServed();
  const left = cached(layerDigest);
  assert.ok(left <= 4 * 1024, `the unused layer gave up its blocks (${left} KiB left)`);
  assert.ok(cached(otherDigest) >= 8 * 1024, 'the layer in use stays');
  assert.ok(cached(layerDigest) + cached(otherDigest) <= 12 * 1024, 'the cache is within its limit');
  // Out of the kernel's page cache too, so that the reads below reach the view.
  execFileSync('dd', [`if=${join(node.dataDir, 'mnt', 'remote', `${layerHex}.data`)}`, 'iflag=nocache', 'count=0'], { stdio: 'ignore' });
  const before = dataServed();
  const again = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await again.exec(read8('/data/big.bin'))).stdout.trim(), String(8 << 20));
  const refetched = (await settledServed()) - before;
  assert.ok(refetched >= (8 << 20) - left * 1024 && refetched < 10 << 20, `evicted blocks are fetched again, only they (${refetched})`);
  await again.delete();
  await b.delete();
  await node.close();
  node = undefined;
});

test('a layer whose metadata or block digests from the store do not match its digest is refused, and nothing of it kept', async () => {
  await node?.close().catch(() => undefined); // left by a test that failed
  node = await startTestWarren({ images: ['busybox:latest'], blobStore: { url: storeUrl, cacheMaxBytes: 1 << 30 } });
  const blobs = join(node.dataDir, 'layers', 'blobs');
  for (const kind of ['.erofs', '.blocks']) {
    tamper = kind;
    try {
      const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent('od/app:1')}`, { layers: [baseDigest, layerDigest] });
      assert.equal(put.status, 400, put.text);
      assert.match(put.text, /does not match its digest/);
    } finally {
      tamper = null;
    }
    assert.deepEqual(
      (await readdir(blobs)).filter((n) => n.startsWith(layerHex)),
      [],
      `nothing of the layer is kept after a bad ${kind}`,
    );
  }
  const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent('od/app:1')}`, { layers: [baseDigest, layerDigest] });
  assert.equal(put.status, 200, put.text);
  const sb = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await sb.exec('cat /data/small.txt')).stdout, 'small file\n');
  await sb.delete();
  await node.close();
  node = undefined;
});

test('a Warren node serves its blob store to others: ranges, HEAD, a listing, admin only', async () => {
  await node?.close().catch(() => undefined); // left by a test that failed
  const base = `${source.url}/v1/blobs/`;
  const auth = { authorization: `Bearer ${source.key}` };
  const list = await fetch(base, { headers: auth });
  assert.equal(list.status, 200);
  assert.match(await list.text(), new RegExp(`href="${layerHex}\\.data"`));
  const want = await readFile(join(source.dataDir, 'layers', 'blobs', `${layerHex}.data`));
  const part = await fetch(`${base}${layerHex}.data`, { headers: { ...auth, range: 'bytes=1000-1999' } });
  assert.equal(part.status, 206);
  assert.deepEqual(Buffer.from(await part.arrayBuffer()), want.subarray(1000, 2000));
  const head = await fetch(`${base}${layerHex}.data`, { method: 'HEAD', headers: auth });
  assert.equal(head.headers.get('content-length'), String(want.length));
  assert.equal((await fetch(`${base}..%2Fwarren.db`, { headers: auth })).status, 404);
  const userKey = await source.client.createKey({ tenant: 'someone' });
  assert.equal((await fetch(base, { headers: { authorization: `Bearer ${userKey}` } })).status, 403);

  node = await startTestWarren({ images: ['busybox:latest'], blobStore: { url: base, key: source.key } });
  const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent('od/app:1')}`, { layers: [baseDigest, layerDigest] });
  assert.equal(put.status, 200, put.text);
  const md5 = "dd if=/data/big.bin bs=1M skip=3 count=1 2>/dev/null | md5sum | cut -d' ' -f1";
  const local = await source.client.sandboxes.create({ image: 'busybox:latest', layers: ['data/big'] });
  const expected = (await local.exec(md5)).stdout;
  await local.delete();
  const sb = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await sb.exec('cat /data/small.txt')).stdout, 'small file\n');
  assert.equal((await sb.exec(md5)).stdout, expected);
  await sb.delete();
  await node.close();
  node = undefined;
});
