import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { runPython } from './python-run.js';
import { http, ownedTempDir, settled, startTestWarren, type TestWarren } from './harness.js';
import { makeTar, type Member } from './tar-writer.js';

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

let t: TestWarren;
let registry: ChildProcess;
let storage: string;
let regPort = 0;
/** A counting proxy in front of the registry: which blobs Warren fetched. */
let proxy: Server;
let proxyPort = 0;
const blobGets: string[] = [];
/** Bytes of blob bodies the proxy passed on, by digest. */
const blobBytes = new Map<string, number>();

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** A docker-registry on loopback storing under `dir`, with `extra` configuration (YAML). */
async function startRegistry(dir: string, extra = ''): Promise<{ port: number; child: ChildProcess }> {
  const port = await freePort();
  const config = join(dir, 'config.yml');
  await writeFile(
    config,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${dir}/data\nhttp:\n  addr: 127.0.0.1:${port}\n${extra}`,
  );
  const child = spawn('docker-registry', ['serve', config], { stdio: 'ignore' });
  for (let i = 0; ; i++) {
    const up = await fetch(`http://127.0.0.1:${port}/v2/`).then(
      (r) => r.status === 200 || r.status === 401,
      () => false,
    );
    if (up) break;
    if (i > 100) {
      child.kill('SIGKILL');
      throw new Error('the registry did not start');
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { port, child };
}

before(async () => {
  storage = await ownedTempDir('registry-');
  const reg = await startRegistry(storage);
  registry = reg.child;
  regPort = reg.port;
  proxy = createServer((req, res) => {
    if (req.url?.includes('/blobs/')) blobGets.push(req.url);
    const up = request({ host: '127.0.0.1', port: regPort, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      const digest = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(req.url ?? '')?.[1];
      if (digest && req.method === 'GET') r.on('data', (c: Buffer) => blobBytes.set(digest, (blobBytes.get(digest) ?? 0) + c.length));
      r.pipe(res);
    });
    req.pipe(up);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  proxyPort = (proxy.address() as AddressInfo).port;
  t = await startTestWarren({ images: ['busybox:latest'] });
});

after(async () => {
  await t?.close();
  proxy?.close();
  registry?.kill('SIGKILL');
  await rm(storage, { recursive: true, force: true });
});

async function pushBlob(repo: string, data: Buffer): Promise<void> {
  const base = `http://127.0.0.1:${regPort}`;
  const start = await fetch(`${base}/v2/${repo}/blobs/uploads/`, { method: 'POST' });
  assert.equal(start.status, 202);
  const loc = new URL(start.headers.get('location') ?? '', base);
  loc.searchParams.set('digest', sha(data));
  const put = await fetch(loc, { method: 'PUT', body: data, headers: { 'content-type': 'application/octet-stream' } });
  assert.equal(put.status, 201, await put.text());
}

/** Pushes an OCI image (gzipped layers) the way a client would; returns the layer blob digests. */
async function pushImage(repo: string, tag: string, layers: Buffer[], o: { env?: string[]; diffIds?: string[] } = {}): Promise<string[]> {
  const gz = layers.map((l) => gzipSync(l));
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: o.env ? { Env: o.env } : undefined,
      rootfs: { type: 'layers', diff_ids: o.diffIds ?? layers.map(sha) },
    }),
  );
  for (const b of [config, ...gz]) await pushBlob(repo, b);
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha(config), size: config.length },
    layers: gz.map((g) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: sha(g), size: g.length })),
  });
  const r = await fetch(`http://127.0.0.1:${regPort}/v2/${repo}/manifests/${tag}`, {
    method: 'PUT',
    body: manifest,
    headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
  });
  assert.equal(r.status, 201, await r.text());
  return gz.map(sha);
}

async function pull(
  ref: string,
  name?: string,
  as: TestWarren = t,
): Promise<Array<{ type: string; image?: { name: string; layers: string[]; env: Record<string, string> }; error?: { code: string; message: string } }>> {
  const r = await http(as, 'POST', '/v1/images/pull', { ref, ...(name ? { name } : {}) });
  assert.equal(r.status, 200, r.text);
  return r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string });
}

test('pull from a real OCI registry; a layer converted before is never fetched again', async () => {
  const bin = await readFile('/bin/busybox');
  const base: Member[] = [
    { path: 'bin/', type: 'dir' },
    { path: 'bin/busybox', content: bin, mode: 0o755 },
    { path: 'bin/sh', type: 'symlink', linkname: 'busybox' },
    { path: 'bin/cat', type: 'symlink', linkname: 'busybox' },
    { path: 'tmp/', type: 'dir', mode: 0o1777 },
  ];
  const baseTar = makeTar(base);
  const [baseBlob, v1Blob] = await pushImage('team/tool', 'v1', [baseTar, makeTar([{ path: 'etc/version', content: 'v1\n' }])], {
    env: ['PATH=/bin', 'TOOL=v1'],
  });
  const [, v2Blob] = await pushImage('team/tool', 'v2', [baseTar, makeTar([{ path: 'etc/version', content: 'v2\n' }])]);

  const events = await pull(`127.0.0.1:${proxyPort}/team/tool:v1`);
  const done = events.at(-1);
  assert.equal(done?.type, 'done', JSON.stringify(events));
  assert.equal(done?.image?.name, 'team/tool:v1');
  assert.deepEqual(done?.image?.env, { PATH: '/bin', TOOL: 'v1' }, "the config's Env is kept");
  assert.ok(events.some((e) => e.type === 'progress'));
  const sb = await t.client.sandboxes.create({ image: 'team/tool:v1' });
  try {
    assert.equal((await sb.exec('cat /etc/version; echo $TOOL')).stdout, 'v1\nv1\n');
  } finally {
    await sb.delete();
  }
  const fetched = (d: string | undefined): number => blobGets.filter((u) => u.endsWith(`/blobs/${d}`)).length;
  assert.equal(fetched(baseBlob), 1);
  assert.equal(fetched(v1Blob), 1);

  const second = (await pull(`127.0.0.1:${proxyPort}/team/tool:v2`, 'tool:v2')).at(-1);
  assert.equal(second?.type, 'done', JSON.stringify(second));
  assert.equal(second?.image?.layers[0], done?.image?.layers[0], 'the shared base is the same layer');
  assert.equal(fetched(baseBlob), 1, 'the base layer was not fetched again');
  assert.equal(fetched(v2Blob), 1);
});

test("the Python client pulls: progress reported, the image's env kept; an unknown tag raises not_found", async () => {
  const bin = await readFile('/bin/busybox');
  await pushImage(
    'py/tool',
    'v1',
    [
      makeTar([
        { path: 'bin/', type: 'dir' },
        { path: 'bin/busybox', content: bin, mode: 0o755 },
        { path: 'etc/py', content: 'pulled\n' },
      ]),
    ],
    {
      env: ['PATH=/bin', 'FROM=py'],
    },
  );
  const program = [
    'import json, sys',
    'from warren import NotFoundError, Warren',
    'w = Warren()',
    'seen = []',
    'img = w.images.pull(sys.argv[1] + "/py/tool:v1", name="py-tool:v1", on_progress=seen.append)',
    'with w.sandboxes.create(image=img.name) as sb:',
    '    out = sb.exec(["/bin/busybox", "cat", "/etc/py"]).stdout',
    'try:',
    '    w.images.pull(sys.argv[1] + "/py/tool:nope")',
    '    missing = None',
    'except NotFoundError as e:',
    '    missing = e.code',
    'w.images.delete(img.name)',
    'print(json.dumps({"name": img.name, "env": img.env, "progress": len(seen) > 0, "out": out, "missing": missing}))',
  ].join('\n');
  const r = await runPython(['-c', program, `127.0.0.1:${regPort}`], { WARREN_URL: t.url, WARREN_API_KEY: t.key });
  assert.equal(r.code, 0, r.out);
  assert.deepEqual(JSON.parse(r.out), { name: 'py-tool:v1', env: { PATH: '/bin', FROM: 'py' }, progress: true, out: 'pulled\n', missing: 'not_found' });
});

test('an unknown tag, an unknown repository and a registry that is down each fail with a clear error', async () => {
  const tag = (await pull(`127.0.0.1:${proxyPort}/team/tool:nope`)).at(-1);
  assert.equal(tag?.error?.code, 'not_found');
  const repo = (await pull(`127.0.0.1:${proxyPort}/no/such:v1`)).at(-1);
  assert.equal(repo?.error?.code, 'not_found');
  const down = (await pull(`127.0.0.1:${await freePort()}/team/tool:v1`)).at(-1);
  assert.equal(down?.error?.code, 'unavailable');
  assert.match(down?.error?.message ?? '', /cannot be reached/);
  const bad = await http(t, 'POST', '/v1/images/pull', { ref: 'Not A Ref!' });
  assert.equal(bad.status, 400);
  assert.match(bad.text, /not an image reference/);
  assert.ok(!(await t.client.images()).some((i) => i.name.includes('nope') || i.name.startsWith('no/')));
});

test("a tenant pulls only from registries the operator allows; a token service elsewhere is not followed, an answer's body not echoed, another tenant's diffID not taken", async () => {
  // A registry on loopback that sends clients for tokens to another local service, or fails
  // with a body of its own.
  const tokenHits: string[] = [];
  const internal = createServer((req, res) => {
    tokenHits.push(req.url ?? '');
    res.end(JSON.stringify({ token: 'internal' }));
  });
  await new Promise<void>((r) => internal.listen(0, '127.0.0.1', () => r()));
  const internalPort = (internal.address() as AddressInfo).port;
  const evil = createServer((req, res) => {
    if (req.url?.startsWith('/v2/realm/')) {
      res.writeHead(401, { 'www-authenticate': `Bearer realm="http://127.0.0.1:${internalPort}/token",service="x"` });
      res.end();
    } else {
      res.writeHead(500);
      res.end('SECRET-INTERNAL-BODY');
    }
  });
  await new Promise<void>((r) => evil.listen(0, '127.0.0.1', () => r()));
  const evilHost = `127.0.0.1:${(evil.address() as AddressInfo).port}`;
  const node = await startTestWarren({ images: [], pullRegistries: [evilHost, `127.0.0.1:${proxyPort}`] });
  try {
    const key = await node.client.createKey({ tenant: 'puller', role: 'builder' });
    const as: TestWarren = { ...node, key };
    // Not allowed: a 403 before any stream; an admin may pull from anywhere.
    const denied = await http(as, 'POST', '/v1/images/pull', { ref: `127.0.0.1:${regPort}/team/tool:v1` });
    assert.equal(denied.status, 403, denied.text);
    assert.match(denied.text, /--pull-registries/);
    assert.equal((await pull(`127.0.0.1:${regPort}/team/tool:v1`, 'admin/tool:v1', node)).at(-1)?.type, 'done');
    const realm = (await pull(`${evilHost}/realm/x:v1`, undefined, as)).at(-1);
    assert.equal(realm?.error?.code, 'permission_denied', JSON.stringify(realm));
    assert.deepEqual(tokenHits, [], 'the token service on another host was never asked');
    const body = (await pull(`${evilHost}/other/x:v1`, undefined, as)).at(-1);
    assert.equal(body?.error?.code, 'unavailable');
    assert.match(body?.error?.message ?? '', /answered 500/);
    assert.doesNotMatch(JSON.stringify(body), /SECRET/);

    // Another tenant's private layer: an image whose config names its diffID over other bytes.
    const secret = makeTar([{ path: 'answers/secret.txt', content: 'pulled-secret\n' }]);
    const owner = await node.client.createKey({ tenant: 'owner', role: 'builder' });
    const up = await http({ ...node, key: owner }, 'POST', '/v1/layers?name=owner/secret', secret, { 'content-type': 'application/x-tar' });
    assert.equal(up.status, 201, up.text);
    await pushImage('thief/img', 'v1', [makeTar([{ path: 'decoy', content: 'x' }])], { diffIds: [sha(secret)] });
    const stolen = (await pull(`127.0.0.1:${proxyPort}/thief/img:v1`, 'puller/img:v1', as)).at(-1);
    assert.notEqual(stolen?.type, 'done', JSON.stringify(stolen));
    assert.equal(stolen?.error?.code, 'invalid_argument');
  } finally {
    await node.close();
    evil.close();
    internal.close();
  }
});

test('layers published to a registry are read from it on demand by another node, checked and cached', async () => {
  const big = randomBytes(16 << 20);
  const up = await http(t, 'POST', '/v1/layers?name=reg/big', makeTar([{ path: 'big/data.bin', content: big }]), { 'content-type': 'application/x-tar' });
  assert.equal(up.status, 201, up.text);
  const digest = (up.json as { digest: string }).digest;
  const store = `oci+http://127.0.0.1:${proxyPort}/warren/layers`;
  const pub = await http(t, 'POST', '/v1/layers/publish', { to: store, image: 'busybox:latest', layers: ['reg/big'] });
  assert.equal(pub.status, 200, pub.text);
  const base = (await t.client.images()).find((i) => i.name === 'busybox:latest')?.layers ?? [];
  const published = (pub.json as { layers: { digest: string; sent: boolean }[] }).layers;
  assert.deepEqual(
    published.map((l) => l.digest),
    [...base, digest],
  );
  assert.ok(published.every((l) => l.sent));
  // Again: the registry has every blob; nothing is sent.
  const again = await http(t, 'POST', '/v1/layers/publish', { to: store, layers: [digest] });
  assert.deepEqual((again.json as { layers: unknown[] }).layers, [{ digest, sent: false }]);
  // Bad requests: not a registry store, nothing named, an unknown layer, a user key.
  assert.equal((await http(t, 'POST', '/v1/layers/publish', { to: `http://127.0.0.1:${proxyPort}/x`, layers: [digest] })).status, 400);
  assert.equal((await http(t, 'POST', '/v1/layers/publish', { to: store })).status, 400);
  assert.equal((await http(t, 'POST', '/v1/layers/publish', { to: store, layers: ['no/such'] })).status, 404);
  const user = await t.client.createKey({ tenant: 'someone' });
  const denied = await fetch(`${t.url}/v1/layers/publish`, {
    method: 'POST',
    headers: { authorization: `Bearer ${user}`, 'content-type': 'application/json' },
    body: JSON.stringify({ to: store, layers: [digest] }),
  });
  assert.equal(denied.status, 403);

  // A node with the registry as its blob store and none of these layers.
  const node = await startTestWarren({ images: [], blobStore: { url: store, cacheMaxBytes: 1 << 30 } });
  try {
    const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent('reg/od:1')}`, { layers: [...base, digest] });
    assert.equal(put.status, 200, put.text);
    blobBytes.clear();
    const sb = await node.client.sandboxes.create({ image: 'reg/od:1' });
    const want = createHash('md5')
      .update(big.subarray(3 << 20, 4 << 20))
      .digest('hex');
    const md5 = "dd if=/big/data.bin bs=1M skip=3 count=1 2>/dev/null | md5sum | cut -d' ' -f1";
    assert.equal((await sb.exec(md5)).stdout.trim(), want);
    assert.equal((await sb.exec('echo hi from the registry')).stdout, 'hi from the registry\n');
    // Read-ahead may still be fetching: the count once it has stopped (no change for a second:
    // its threads may be starved a while on a busy machine).
    const total = (): number => [...blobBytes.values()].reduce((a, b) => a + b, 0);
    const fetched = await settled(total);
    assert.ok(fetched > 0 && fetched <= 8 << 20, `read 1 MiB of 16, fetched ${fetched} bytes`);
    const other = await node.client.sandboxes.create({ image: 'reg/od:1' });
    assert.equal((await other.exec(md5)).stdout.trim(), want);
    assert.equal(total(), fetched, 'cached blocks are not fetched again');
    // A layer the registry does not hold.
    const none = await http(node, 'PUT', `/v1/images/${encodeURIComponent('reg/none:1')}`, { layers: [`sha256:${'1'.repeat(64)}`] });
    assert.equal(none.status, 404, none.text);
  } finally {
    await node.close();
  }
});

test('a registry that wants credentials: publish, on-demand reads and pulls work with them, and are refused clearly without', async () => {
  const dir = await ownedTempDir('registry-auth-');
  const hash = execFileSync('htpasswd', ['-Bbn', 'warren', 's3cret']).toString().trim();
  await writeFile(join(dir, 'htpasswd'), hash + '\n');
  const reg = await startRegistry(dir, `auth:\n  htpasswd:\n    realm: warren\n    path: ${dir}/htpasswd\n`);
  const auth = { username: 'warren', password: 's3cret' };
  let node: TestWarren | undefined;
  try {
    const data = randomBytes(3 << 20);
    const up = await http(t, 'POST', '/v1/layers?name=reg/private', makeTar([{ path: 'private/data.bin', content: data }]), {
      'content-type': 'application/x-tar',
    });
    assert.equal(up.status, 201, up.text);
    const digest = (up.json as { digest: string }).digest;
    const store = `oci+http://127.0.0.1:${reg.port}/warren/private`;
    const refused = await http(t, 'POST', '/v1/layers/publish', { to: store, layers: [digest] });
    assert.equal(refused.status, 403, refused.text);
    assert.match(refused.text, /wants credentials/);
    const wrong = await http(t, 'POST', '/v1/layers/publish', { to: store, layers: [digest], auth: { username: 'warren', password: 'nope' } });
    assert.equal(wrong.status, 403, wrong.text);
    const pub = await http(t, 'POST', '/v1/layers/publish', { to: store, image: 'busybox:latest', layers: [digest], auth });
    assert.equal(pub.status, 200, pub.text);
    const base = (await t.client.images()).find((i) => i.name === 'busybox:latest')?.layers ?? [];

    // A node with the credentials reads the layer on demand (its view sends them too); one without is refused.
    node = await startTestWarren({ images: [], blobStore: { url: store, cacheMaxBytes: 1 << 30 } });
    const denied = await http(node, 'PUT', `/v1/images/${encodeURIComponent('reg/private:1')}`, { layers: [...base, digest] });
    assert.equal(denied.status, 403, denied.text);
    await node.close();
    node = await startTestWarren({ images: [], blobStore: { url: store, username: 'warren', password: 's3cret', cacheMaxBytes: 1 << 30 } });
    const put = await http(node, 'PUT', `/v1/images/${encodeURIComponent('reg/private:1')}`, { layers: [...base, digest] });
    assert.equal(put.status, 200, put.text);
    const sb = await node.client.sandboxes.create({ image: 'reg/private:1' });
    const want = createHash('md5')
      .update(data.subarray(1 << 20, 2 << 20))
      .digest('hex');
    assert.equal((await sb.exec("dd if=/private/data.bin bs=1M skip=1 count=1 2>/dev/null | md5sum | cut -d' ' -f1")).stdout.trim(), want);
    await sb.delete();

    // Pulls: without credentials a clear refusal; with them the registry answers (no such tag).
    const anon = await http(t, 'POST', '/v1/images/pull', { ref: `127.0.0.1:${reg.port}/warren/private:nope` });
    assert.match(anon.text, /"code":"permission_denied"/);
    const authed = await http(t, 'POST', '/v1/images/pull', { ref: `127.0.0.1:${reg.port}/warren/private:nope`, auth });
    assert.match(authed.text, /"code":"not_found"/);
  } finally {
    await node?.close();
    reg.child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
});
