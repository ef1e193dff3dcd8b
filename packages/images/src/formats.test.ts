import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { archiveLayers } from './archive.js';
import { configEnv } from './image-config.js';
import { BLOCK_BYTES, blockDigests, layerDigest } from './layer-store.js';
import { parseImageRef } from './registry.js';
import { blobfsArgs } from './remote.js';
import { readTar, type TarEntry } from './tar.js';
import { layerPath } from './unpack.js';

/** One ustar header block (checksum filled in). */
function header(name: string, flag: string, size: number): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0);
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(size.toString(8).padStart(11, '0') + '\0', 124);
  h.write('00000000000\0', 136);
  h.write('        ', 148);
  h.write(flag, 156);
  h.write('ustar\0' + '00', 257, 'latin1');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return h;
}
const pad = (b: Buffer): Buffer => Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)]);

async function entries(tar: Buffer): Promise<Array<TarEntry & { body: string }>> {
  const out: Array<TarEntry & { body: string }> = [];
  await readTar(Readable.from([tar]), async (e, body) => {
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(c);
    out.push({ ...e, body: Buffer.concat(chunks).toString() });
  });
  return out;
}

test('tar: members, PAX long names and xattrs; the stream digest is the diffID', async () => {
  const pax = Buffer.from('30 path=a/very/long/name/here\n25 SCHILY.xattr.user.k=v\n');
  const tar = Buffer.concat([header('PaxHeader', 'x', pax.length), pad(pax), header('short', '0', 5), pad(Buffer.from('hello')), Buffer.alloc(1024)]);
  const e = await entries(tar);
  assert.equal(e.length, 1);
  assert.equal(e[0]?.path, 'a/very/long/name/here');
  assert.equal(e[0]?.body, 'hello');
  assert.equal(e[0]?.xattrs.get('user.k')?.toString(), 'v');
  assert.equal(e[0]?.offset, 1536);
  const { digest, bytes } = await readTar(Readable.from([tar]), async () => undefined);
  assert.equal(digest, `sha256:${createHash('sha256').update(tar).digest('hex')}`);
  assert.equal(bytes, tar.length);
});

test('tar: truncated, corrupt and unsupported archives are refused', async () => {
  const good = Buffer.concat([header('f', '0', 700), pad(Buffer.alloc(700, 1))]);
  await assert.rejects(entries(good.subarray(0, 900)), /truncated/);
  const bad = header('f', '0', 0);
  bad[0] = 0x41;
  await assert.rejects(entries(bad), /checksum/);
  await assert.rejects(entries(header('sparse', 'S', 0)), /not supported/);
});

test('layer paths: relative components only', () => {
  assert.deepEqual(layerPath('./a/./b/'), ['a', 'b']);
  assert.deepEqual(layerPath('./'), []);
  assert.throws(() => layerPath('/etc/passwd'), /absolute/);
  assert.throws(() => layerPath('a/../../b'), /leaves the layer/);
});

test('image references parse as docker reads them', () => {
  assert.deepEqual(parseImageRef('localhost:5000/library/python:3.12'), { registry: 'localhost:5000', repository: 'library/python', reference: '3.12' });
  assert.deepEqual(parseImageRef('python'), { registry: 'registry-1.docker.io', repository: 'library/python', reference: 'latest' });
  assert.deepEqual(parseImageRef('team/tool:v1'), { registry: 'registry-1.docker.io', repository: 'team/tool', reference: 'v1' });
  const digest = `sha256:${'a'.repeat(64)}`;
  assert.equal(parseImageRef(`127.0.0.1:9/x@${digest}`).reference, digest);
  assert.throws(() => parseImageRef('Not A Ref!'), /not an image reference/);
});

test('archive manifests: docker save and OCI layout name their layers, diffIDs and environment', () => {
  const json = (v: unknown): Buffer => Buffer.from(JSON.stringify(v));
  const docker = new Map([
    ['manifest.json', json([{ Config: 'c.json', Layers: ['a/layer.tar', 'b/layer.tar'] }])],
    ['c.json', json({ rootfs: { diff_ids: ['sha256:1', 'sha256:2'] }, config: { Env: ['PATH=/opt/bin:/bin', 'A=1', 'A=2=3', 'EMPTY='] } })],
  ]);
  assert.deepEqual(archiveLayers(docker), {
    layers: [
      { path: 'a/layer.tar', diffId: 'sha256:1', blobDigest: undefined },
      { path: 'b/layer.tar', diffId: 'sha256:2', blobDigest: undefined },
    ],
    env: { PATH: '/opt/bin:/bin', A: '2=3', EMPTY: '' },
  });
  // An OCI layout: every JSON blob is stored under its own digest, which is checked.
  const h = (c: string): string => `sha256:${c.repeat(64)}`;
  const oci = new Map<string, Buffer>();
  const blob = (v: unknown): string => {
    const b = json(v);
    const hex = createHash('sha256').update(b).digest('hex');
    oci.set(`blobs/sha256/${hex}`, b);
    return `sha256:${hex}`;
  };
  const config = blob({ rootfs: { diff_ids: [h('f')] } });
  const manifest = blob({ config: { digest: config }, layers: [{ digest: h('e'), mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip' }] });
  const index = blob({
    manifests: [
      { digest: h('b'), platform: { os: 'linux', architecture: 'arm64' } },
      { digest: manifest, platform: { os: 'linux', architecture: 'amd64' } },
    ],
  });
  oci.set('index.json', json({ manifests: [{ digest: index }] }));
  assert.deepEqual(archiveLayers(oci), { layers: [{ path: `blobs/sha256/${'e'.repeat(64)}`, blobDigest: h('e'), diffId: h('f') }], env: {} });
  // A config whose bytes are not what its digest names is refused.
  oci.set(`blobs/sha256/${config.slice(7)}`, json({ rootfs: { diff_ids: [h('f')] }, config: { Env: ['EVIL=1'] } }));
  assert.throws(() => archiveLayers(oci), /does not match its digest/);
  assert.throws(() => archiveLayers(new Map()), /not an image archive/);
});

test('an image config Env must be NAME=value entries, within bounds', () => {
  assert.deepEqual(configEnv({}), {});
  assert.deepEqual(configEnv({ config: null }), {});
  assert.throws(() => configEnv({ config: { Env: 'PATH=/bin' } }), /not a list/);
  assert.throws(() => configEnv({ config: { Env: ['NOEQUALS'] } }), /not NAME=value/);
  assert.throws(() => configEnv({ config: { Env: ['=x'] } }), /not NAME=value/);
  assert.throws(() => configEnv({ config: { Env: ['BAD NAME=x'] } }), /not NAME=value/);
  assert.throws(() => configEnv({ config: { Env: [7] } }), /not NAME=value/);
  assert.throws(() => configEnv({ config: { Env: Array.from({ length: 1025 }, (_, i) => `V${i}=1`) } }), /more than 1024/);
  assert.throws(() => configEnv({ config: { Env: [`BIG=${'x'.repeat(300 * 1024)}`] } }), /larger than/);
});

test('the on-demand view reads the blob store in blocks with a bounded, local cache', () => {
  const o = { url: 'http://store:8080/blobs', sourcesDir: '/s', mountDir: '/m', cacheDir: '/c', cacheMaxBytes: 4 << 20 };
  const a = blobfsArgs(o);
  const opt = (k: string): string | undefined => a[a.indexOf(k) + 1];
  assert.equal(a[0], '/m');
  assert.equal(opt('--url'), 'http://store:8080/blobs');
  assert.equal(opt('--sources'), '/s');
  assert.equal(opt('--cache'), '/c');
  assert.equal(opt('--max-bytes'), String(4 << 20));
  assert.throws(() => blobfsArgs({ ...o, cacheMaxBytes: 1024 }), /at least one block/);
  // A registry store: blobs by digest, over HTTPS unless asked otherwise.
  const r = blobfsArgs({ ...o, url: 'oci://registry.example:5000/warren/layers' });
  assert.equal(r[r.indexOf('--url') + 1], 'https://registry.example:5000/v2/warren/layers/blobs/');
  const h = blobfsArgs({ ...o, url: 'oci+http://10.0.0.5:5000/layers' });
  assert.equal(h[h.indexOf('--url') + 1], 'http://10.0.0.5:5000/v2/layers/blobs/');
  for (const bad of ['ftp://x/y', 'oci://host', 'oci://host/Bad_Repo', 'store:8080/blobs', 'http://a b']) {
    assert.throws(() => blobfsArgs({ ...o, url: bad }), /blob store/, bad);
  }
});

test('a layer digest covers its metadata and the digest of every 1 MiB block of its data', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-digest-'));
  try {
    const meta = Buffer.from('metadata image');
    const data = randomBytes(2 * BLOCK_BYTES + 12345);
    await writeFile(join(dir, 'm'), meta);
    await writeFile(join(dir, 'd'), data);
    await writeFile(join(dir, 'e'), '');
    const sha = (b: Buffer): Buffer => createHash('sha256').update(b).digest();
    const blocks = Buffer.concat([sha(data.subarray(0, BLOCK_BYTES)), sha(data.subarray(BLOCK_BYTES, 2 * BLOCK_BYTES)), sha(data.subarray(2 * BLOCK_BYTES))]);
    const got = await layerDigest(join(dir, 'm'), join(dir, 'd'));
    assert.deepEqual(got.blocks, blocks);
    assert.equal(got.digest, `sha256:${sha(Buffer.concat([meta, blocks])).toString('hex')}`);
    // One byte changed anywhere changes the digest; an empty data file has no blocks.
    data[BLOCK_BYTES + 7] = (data[BLOCK_BYTES + 7] ?? 0) ^ 1;
    await writeFile(join(dir, 'd'), data);
    assert.notEqual((await layerDigest(join(dir, 'm'), join(dir, 'd'))).digest, got.digest);
    assert.equal((await blockDigests(join(dir, 'e'))).length, 0);
    assert.equal((await layerDigest(join(dir, 'm'), null)).digest, `sha256:${sha(meta).toString('hex')}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
