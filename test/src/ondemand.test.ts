import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { http, startTestWarren, type TestWarren } from './harness.js';
import { makeTar } from './tar-writer.js';

let source: TestWarren;
let node: TestWarren | undefined;
let store: Server;
let storeUrl = '';
/** Bytes the blob store served, by file name. */
const served = new Map<string, number>();
let storeDown = false;

/** A plain HTTP blob store over a directory: ranges, HEAD, an HTML index, counted bytes. */
function blobServer(dir: string): Server {
  return createServer((req, res) => {
    if (storeDown) {
      req.socket.destroy();
      return;
    }
    void (async () => {
      const name = decodeURIComponent((req.url ?? '/').split('?')[0] ?? '/').replace(/^\/+/, '');
      if (name === '') {
        const names = (await readdir(dir)).filter((n) => /^[0-9a-f]{64}\.(erofs|data)$/.test(n));
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end(`<html><body>${names.map((n) => `<a href="${n}">${n}</a>`).join('\n')}</body></html>`);
        return;
      }
      const st = name.includes('/') ? null : await stat(join(dir, name)).catch(() => null);
      if (!st?.isFile()) {
        res.writeHead(404);
        res.end();
        return;
      }
      const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
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
      await pipeline(createReadStream(join(dir, name), { start, end }), res).catch(() => undefined);
    })();
  });
}

const BIG = 32 << 20;
let layerHex = '';
let baseDigest = '';
let layerDigest = '';

before(async () => {
  source = await startTestWarren({ images: ['busybox:latest'] });
  const big = randomBytes(BIG);
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
  const first = dataServed();
  assert.ok(first > 0 && first <= 4 << 20, `read 1 MiB of 32, fetched ${first}`);
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
  await node.close();
  assert.doesNotMatch(await readFile('/proc/self/mounts', 'utf8'), new RegExp(keepDir));
  node = undefined;
});

test('over its limit, the cache lets go of layers no sandbox uses first; they are fetched again when needed', async () => {
  // A second on-demand layer on the source node.
  const up = await http(source, 'POST', '/v1/layers?name=data/other', makeTar([{ path: 'other/big.bin', content: randomBytes(12 << 20) }]), {
    'content-type': 'application/x-tar',
  });
  assert.equal(up.status, 201, up.text);
  const otherDigest = (up.json as { digest: string }).digest;
  node = await startTestWarren({ images: ['busybox:latest'], blobStore: { url: storeUrl, cacheMaxBytes: 12 << 20, trimSeconds: 1 } });
  for (const [name, layers] of [
    ['od/app:1', [baseDigest, layerDigest]],
    ['od/other:1', [baseDigest, otherDigest]],
  ] as const) {
    const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent(name)}`, { layers });
    assert.equal(put.status, 200, put.text);
  }
  const cacheFile = (digest: string): string => {
    const dir = join(node?.dataDir ?? '', 'cache', 'blobs', 'vfs');
    return execFileSync('sh', ['-c', `du -k ${dir}/*/${digest.slice(7)}.data 2>/dev/null | cut -f1`])
      .toString()
      .trim();
  };
  const read8 = (p: string): string => `dd if=${p} bs=1M count=8 2>/dev/null | wc -c`;
  const a = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await a.exec(read8('/data/big.bin'))).stdout.trim(), String(8 << 20));
  await a.delete();
  assert.doesNotMatch(await readFile('/proc/self/mountinfo', 'utf8'), new RegExp(`mnt/layers/${layerHex}`), 'the idle on-demand layer is unmounted');
  assert.ok(Number(cacheFile(layerDigest)) >= 8 * 1024, 'under the limit, nothing is evicted');
  // Another layer's reads push the cache over its limit: the unused layer goes, the used one stays.
  const b = await node.client.sandboxes.create({ image: 'od/other:1' });
  assert.equal((await b.exec(read8('/other/big.bin'))).stdout.trim(), String(8 << 20));
  for (let i = 0; i < 40 && cacheFile(layerDigest) !== ''; i++) await new Promise((r) => setTimeout(r, 250));
  assert.equal(cacheFile(layerDigest), '', 'the unused layer was evicted');
  assert.ok(Number(cacheFile(otherDigest)) >= 8 * 1024, 'the layer in use stays');
  const before = dataServed();
  const again = await node.client.sandboxes.create({ image: 'od/app:1' });
  assert.equal((await again.exec(read8('/data/big.bin'))).stdout.trim(), String(8 << 20));
  assert.ok(dataServed() - before >= 8 << 20, 'evicted chunks are fetched again');
  await again.delete();
  await b.delete();
  await node.close();
  node = undefined;
});

test('a Warren node serves its blob store to others: ranges, HEAD, a listing, admin only', async () => {
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
