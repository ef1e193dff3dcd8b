import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { errorCode, hostLeftovers, http, startTestWarren, type TestWarren } from './harness.js';
import { dockerSave, makeTar, type Member } from './tar-writer.js';

let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'] });
});
after(async () => {
  await t?.close();
});

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

async function upload(path: string, body: Buffer): Promise<{ status: number; json: unknown; text: string }> {
  return http(t, 'POST', path, body, { 'content-type': 'application/x-tar' });
}

async function blobs(): Promise<string[]> {
  return (await readdir(join(t.dataDir, 'layers', 'blobs'))).sort();
}

async function scratchLeft(): Promise<string[]> {
  return readdir(join(t.dataDir, 'layers', 'tmp'));
}

/** The NDJSON lines of an import. */
async function importImage(name: string, body: Buffer): Promise<Array<{ type: string; image?: { layers: string[] }; error?: { code: string } }>> {
  const r = await http(t, 'POST', `/v1/images/import?name=${encodeURIComponent(name)}`, body, { 'content-type': 'application/x-tar' });
  assert.equal(r.status, 200, r.text);
  return r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string });
}

const LAYER_A: Member[] = [
  { path: 'work/', type: 'dir', mode: 0o750, uid: 1000, gid: 1000 },
  { path: 'work/a.txt', content: 'alpha\n', mode: 0o640, uid: 1000, gid: 1000, xattrs: { 'user.origin': 'layer-a' } },
  { path: 'work/link', type: 'symlink', linkname: 'a.txt' },
  { path: 'work/hard', type: 'link', linkname: 'work/a.txt' },
  { path: 'work/fifo', type: 'fifo', mode: 0o600 },
  { path: 'work/null', type: 'char', major: 1, minor: 3, mode: 0o666 },
  { path: 'work/suid', content: '#!/bin/sh\n', mode: 0o4755 },
  { path: 'etc/.wh.motd' },
  { path: 'etc/apt/.wh..wh..opq' },
  { path: 'etc/apt/only', content: 'the only file\n' },
  { path: `deep/${'d'.repeat(120)}/f`, content: 'long path\n' },
];

describe('layers: upload, stack, whiteouts, dedupe', () => {
  test('an uploaded layer stacks over an image with its files, links, devices, modes, owners and xattrs', async () => {
    const tar = makeTar(LAYER_A);
    const r = await upload('/v1/layers?name=ws/a', tar);
    assert.equal(r.status, 201, r.text);
    const layer = r.json as { name: string; digest: string; sizeBytes: number };
    assert.equal(layer.name, 'ws/a');
    assert.match(layer.digest, /^sha256:[0-9a-f]{64}$/);

    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest', layers: ['ws/a'] });
    try {
      assert.deepEqual(sb.info.layers, ['ws/a']);
      const out = await sb.exec(
        [
          'stat -c "%a %u %g %F" /work /work/a.txt /work/fifo /work/null /work/suid',
          'readlink /work/link',
          'test "$(stat -c %i /work/a.txt)" = "$(stat -c %i /work/hard)" && echo same-inode',
          'test -e /etc/motd || echo motd-gone',
          'ls /etc/apt',
          `cat /deep/${'d'.repeat(120)}/f`,
          "python3 -c \"import os; print(os.getxattr('/work/a.txt', 'user.origin').decode())\"",
          'cat /work/null 2>/dev/null || echo device-refused',
        ].join('; '),
      );
      assert.equal(
        out.stdout,
        [
          '750 1000 1000 directory',
          '640 1000 1000 regular file',
          '600 0 0 fifo',
          '666 0 0 character special file',
          '4755 0 0 regular file',
          'a.txt',
          'same-inode',
          'motd-gone',
          'only',
          'long path',
          'layer-a',
          'device-refused',
          '',
        ].join('\n'),
        out.stderr,
      );
      // Files are owned by the shifted ids on the host.
      const blob = join(t.dataDir, 'layers', 'blobs', `${layer.digest.slice(7)}.erofs`);
      assert.ok((await stat(blob)).size > 0);
    } finally {
      await sb.delete();
    }
  });

  test('layers stack in order, the last on top; the same tar is stored once', async () => {
    const before = await blobs();
    const again = await upload('/v1/layers?name=ws/a-copy', makeTar(LAYER_A));
    assert.equal(again.status, 201);
    assert.deepEqual(await blobs(), before, 'the same tar made no new blob');
    const b = await upload('/v1/layers?name=ws/b', gzipSync(makeTar([{ path: 'work/.wh.a.txt' }, { path: 'work/b.txt', content: 'beta\n' }])));
    assert.equal(b.status, 201, b.text);
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', layers: ['ws/a', 'ws/b'] });
    try {
      const out = await sb.exec('ls /work | sort | tr "\\n" " "; cat /work/hard');
      assert.equal(out.stdout, 'b.txt fifo hard link null suid alpha\n');
    } finally {
      await sb.delete();
    }
    const listed = (await http(t, 'GET', '/v1/layers')).json as { layers: Array<{ name: string }> };
    assert.deepEqual(
      listed.layers.map((l) => l.name),
      ['ws/a', 'ws/a-copy', 'ws/b'],
    );
  });

  test('many layers stack in one sandbox (more than one page of mount options would hold)', async () => {
    const names: string[] = [];
    for (let i = 0; i < 80; i++) {
      const r = await upload(`/v1/layers?name=many/w${i}`, makeTar([{ path: `ws/w${i}`, content: `${i}\n` }]));
      assert.equal(r.status, 201, r.text);
      names.push(`many/w${i}`);
    }
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', layers: names });
    try {
      assert.equal((await sb.exec('ls /ws | wc -l; cat /ws/w79')).stdout, '80\n79\n');
    } finally {
      await sb.delete();
    }
  });

  test('a layer that breaks the platform mount point fails the create cleanly; one that moves it stays confined', async () => {
    const file = await upload('/v1/layers?name=evil/warren-file', makeTar([{ path: '.warren', content: 'not a directory' }]));
    assert.equal(file.status, 201, file.text);
    const r = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', layers: ['evil/warren-file'] });
    assert.equal(r.status, 500, r.text);
    assert.match(r.text, /starting the sandbox failed: .*mount/);
    const id = (r.json as { error: { details: { id: string } } }).error.details.id;
    assert.deepEqual(hostLeftovers(id), []);
    assert.equal((await t.client.sandboxes.get(id)).info.state, 'failed');
    // A symlink there resolves inside the sandbox's own root: the platform lands on its /tmp.
    const link = await upload('/v1/layers?name=evil/warren-link', makeTar([{ path: '.warren', type: 'symlink', linkname: '../../../tmp' }]));
    assert.equal(link.status, 201, link.text);
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', layers: ['evil/warren-link'] });
    try {
      assert.equal((await sb.exec('ls /tmp')).stdout.includes('warren-init'), true);
      assert.notEqual((await sb.exec('touch /tmp/x')).exitCode, 0, 'read-only');
    } finally {
      await sb.delete();
    }
  });

  test('hostile and broken tars are refused; nothing half-made is left and the host is untouched', async () => {
    const before = await blobs();
    const passwd = await readFile('/etc/passwd', 'utf8');
    const cases: Array<[string, Buffer]> = [
      ['dot-dot', makeTar([{ path: '../escape', content: 'x' }])],
      ['absolute', makeTar([{ path: '/etc/evil', content: 'x' }])],
      [
        'through a symlink',
        makeTar([
          { path: 'evil', type: 'symlink', linkname: '/etc' },
          { path: 'evil/passwd', content: 'owned\n' },
        ]),
      ],
      ['hard link out', makeTar([{ path: 'h', type: 'link', linkname: '../../etc/shadow' }])],
      ['hard link to nothing', makeTar([{ path: 'h', type: 'link', linkname: 'missing' }])],
      ['truncated', makeTar([{ path: 'big', content: 'y'.repeat(5000) }]).subarray(0, 1500)],
      ['bad checksum', Buffer.concat([Buffer.from('garbage'.padEnd(512, 'x')), Buffer.alloc(1024)])],
      ['bad gzip', Buffer.concat([Buffer.from([0x1f, 0x8b, 8, 0]), Buffer.from('not really gzip')])],
    ];
    for (const [what, body] of cases) {
      const r = await upload(`/v1/layers?name=bad/${what.replace(/ /g, '-')}`, body);
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(errorCode(r), 'invalid_argument', what);
    }
    assert.equal(await readFile('/etc/passwd', 'utf8'), passwd);
    assert.deepEqual(await blobs(), before);
    assert.deepEqual(await scratchLeft(), []);
    const unknown = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', layers: ['no/such'] });
    assert.equal(errorCode(unknown), 'not_found');
    const badName = await upload('/v1/layers?name=Bad Name', makeTar([]));
    assert.equal(errorCode(badName), 'invalid_argument');
  });

  test('a PAX size=1.5 (136 bytes gzipped) and a symlink declaring 1 GiB (1 MB gzipped) are refused at once; the server still answers', async () => {
    const before = await blobs();
    // W3-01: the reader took the half byte left as a read of nothing, forever, in microtasks.
    const fractional = gzipSync(makeTar([{ path: 'f', content: 'A', pax: { size: '1.5' } }]), { level: 9 });
    assert.ok(fractional.length < 160, `${fractional.length} bytes`);
    // W3-07: a symlink's declared data was buffered whole, recopied on every chunk. Gzip members
    // concatenate, so 1 GiB of zeros is 1,024 copies of one gzipped MiB.
    const mib = gzipSync(Buffer.alloc(1 << 20), { level: 9 });
    const symlink = Buffer.concat([
      gzipSync(makeTar([{ path: 'l', type: 'symlink', linkname: 'x', declaredSize: 2 ** 30 }], { end: false })),
      ...Array.from({ length: 1024 }, () => mib),
      gzipSync(Buffer.alloc(1024)),
    ]);
    assert.ok(symlink.length < 2 << 20, `${symlink.length} bytes`);
    for (const [what, body, message] of [
      ['fractional-size', fractional, /PAX size=1\.5 is not a whole number/],
      ['symlink-of-1gib', symlink, /l is a symlink and declares 1073741824 bytes of data/],
    ] as const) {
      const started = performance.now();
      // A server that spins never answers: the client gives up instead of the test hanging.
      const res = await fetch(`${t.url}/v1/layers?name=bad/${what}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/x-tar' },
        body,
        signal: AbortSignal.timeout(20_000),
      });
      const text = await res.text();
      assert.equal(res.status, 400, `${what}: ${text}`);
      assert.match(text, message);
      assert.ok(performance.now() - started < 5000, `${what}: answered after ${Math.round(performance.now() - started)} ms`);
      const health = await fetch(`${t.url}/healthz`, { signal: AbortSignal.timeout(5000) });
      assert.equal(health.status, 200);
    }
    assert.deepEqual(await blobs(), before);
    assert.deepEqual(await scratchLeft(), []);
  });
});

describe('commit', () => {
  test('a sandbox becomes an image: its changes without excluded paths and platform residues; it keeps running', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      await sb.exec('mkdir -p /opt/tool /root/cache && echo v1 > /opt/tool/version && echo junk > /root/cache/x && echo ls > /root/.ash_history && rm /bin/vi');
      const r = await http(t, 'POST', `/v1/sandboxes/${sb.id}/commit`, { name: 'built/tool:v1', exclude: ['/root/cache'] });
      assert.equal(r.status, 201, r.text);
      const image = r.json as { name: string; layers: string[] };
      const base = (await t.client.images()).find((i) => i.name === 'busybox:latest');
      assert.deepEqual(image.layers.slice(0, -1), base?.layers);
      assert.equal(image.layers.length, (base?.layers.length ?? 0) + 1);
      assert.equal((await sb.exec('echo still running')).stdout, 'still running\n');

      const child = await t.client.sandboxes.create({ image: 'built/tool:v1' });
      try {
        const out = await child.exec(
          'cat /opt/tool/version; test -e /bin/vi || echo vi-gone; test -e /root/cache || echo cache-excluded; test -e /root/.ash_history || echo no-history',
        );
        assert.equal(out.stdout, 'v1\nvi-gone\ncache-excluded\nno-history\n');
      } finally {
        await child.delete();
      }
    } finally {
      await sb.delete();
    }
  });
});

/** A static busybox as an image's only layer: enough for the init to run commands. */
async function busyboxLayer(): Promise<Member[]> {
  const bin = await readFile('/bin/busybox');
  return [
    { path: 'bin/', type: 'dir' },
    { path: 'bin/busybox', content: bin, mode: 0o755 },
    ...['sh', 'ls', 'cat', 'echo', 'test', 'stat', 'find', 'sort'].map((n): Member => ({ path: `bin/${n}`, type: 'symlink', linkname: 'busybox' })),
    { path: 'etc/', type: 'dir' },
    { path: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\n' },
    { path: 'etc/group', content: 'root:x:0:\n' },
    { path: 'root/', type: 'dir', mode: 0o700 },
    { path: 'tmp/', type: 'dir', mode: 0o1777 },
    { path: 'opt/gone', content: 'removed by the next layer\n' },
  ];
}

const APP_LAYER: Member[] = [
  { path: 'opt/.wh.gone' },
  { path: 'app/', type: 'dir' },
  { path: 'app/main.sh', content: 'echo hello from the app\n', mode: 0o755 },
];

function ociLayout(layers: Buffer[], opts: { corruptDigestOf?: number; env?: string[] } = {}): Buffer {
  const gz = layers.map((l) => gzipSync(l));
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: opts.env ? { Env: opts.env } : undefined,
      rootfs: { type: 'layers', diff_ids: layers.map(sha) },
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha(config), size: config.length },
      layers: gz.map((g, i) => ({
        mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
        digest: i === opts.corruptDigestOf ? sha(Buffer.from('something else')) : sha(g),
        size: g.length,
      })),
    }),
  );
  const index = { schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: sha(manifest), size: manifest.length }] };
  const blob = (b: Buffer, digest = sha(b)): Member => ({ path: `blobs/sha256/${digest.slice(7)}`, content: b });
  return makeTar([
    { path: 'oci-layout', content: '{"imageLayoutVersion":"1.0.0"}' },
    { path: 'index.json', content: JSON.stringify(index) },
    { path: 'blobs/', type: 'dir' },
    { path: 'blobs/sha256/', type: 'dir' },
    blob(config),
    blob(manifest),
    ...gz.map((g, i) => blob(g, i === opts.corruptDigestOf ? sha(Buffer.from('something else')) : sha(g))),
  ]);
}

describe('import', () => {
  test('docker save and OCI layout archives import to the same layers; a sandbox sees exactly their files', async () => {
    const layers = [makeTar(await busyboxLayer()), makeTar(APP_LAYER)];
    const events = await importImage('app:docker', dockerSave(layers));
    const done = events.at(-1);
    assert.equal(done?.type, 'done', JSON.stringify(events));
    assert.ok(events.some((e) => e.type === 'progress'));
    const oci = (await importImage('app:oci', ociLayout(layers))).at(-1);
    assert.equal(oci?.type, 'done', JSON.stringify(oci));
    assert.deepEqual(oci?.image?.layers, done?.image?.layers, 'shared layers are stored once');

    const sb = await t.client.sandboxes.create({ image: 'app:oci' });
    try {
      const out = await sb.exec(
        '/app/main.sh; find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /.warren -o -path /etc/resolv.conf -o -path /etc/hosts -o -path /etc/hostname \\) -prune -o -print | sort',
      );
      const files = out.stdout.trim().split('\n');
      assert.equal(files[0], 'hello from the app');
      // tar -t of the layers, whiteouts applied (the platform's mount points are pruned).
      const expected = ['/', '/app', '/app/main.sh', '/bin', '/etc', '/etc/group', '/etc/passwd', '/opt', '/root', '/tmp']
        .concat(['busybox', 'sh', 'ls', 'cat', 'echo', 'test', 'stat', 'find', 'sort'].map((n) => `/bin/${n}`))
        .sort();
      assert.deepEqual(files.slice(1), expected);
    } finally {
      await sb.delete();
    }
  });

  test("an imported image keeps its config's Env: GET /v1/images shows it and its sandboxes' processes start from it", async () => {
    const layers = [makeTar(await busyboxLayer()), makeTar(APP_LAYER)];
    const env = ['PATH=/app:/bin', 'APP_MODE=import', 'APP_MODE=last-wins'];
    for (const [name, archive] of [
      ['envimg:docker', dockerSave(layers, env)],
      ['envimg:oci', ociLayout(layers, { env })],
    ] as const) {
      const done = (await importImage(name, archive)).at(-1) as { image?: { env?: unknown } } | undefined;
      assert.deepEqual(done?.image?.env, { PATH: '/app:/bin', APP_MODE: 'last-wins' }, name);
      assert.deepEqual((await t.client.images()).find((i) => i.name === name)?.env, { PATH: '/app:/bin', APP_MODE: 'last-wins' });
      const sb = await t.client.sandboxes.create({ image: name });
      try {
        // main.sh is found on the image's PATH.
        assert.equal((await sb.exec('main.sh; echo $APP_MODE $PATH')).stdout, 'hello from the app\nlast-wins /app:/bin\n');
      } finally {
        await sb.delete();
      }
    }
    const bad = (await importImage('envimg:bad', dockerSave(layers, ['NOT AN ENTRY']))).at(-1);
    assert.equal(bad?.error?.code, 'invalid_argument');
  });

  test('a corrupt archive or a layer that does not match its digest fails cleanly', async () => {
    const layers = [makeTar(await busyboxLayer()), makeTar([{ path: 'x', content: 'new' }])];
    const before = await blobs();
    const mismatch = (await importImage('bad:digest', ociLayout(layers, { corruptDigestOf: 1 }))).at(-1);
    assert.equal(mismatch?.type, 'error');
    assert.equal(mismatch?.error?.code, 'invalid_argument');
    const junk = (await importImage('bad:junk', Buffer.from('not an archive at all'.padEnd(2048, '!')))).at(-1);
    assert.equal(junk?.type, 'error');
    const empty = (await importImage('bad:empty', makeTar([{ path: 'readme', content: 'hi' }]))).at(-1);
    assert.equal(empty?.error?.code, 'invalid_argument');
    // The archive and each layer in it go through the same tar reader: a PAX size=1.5 in either is refused.
    const fractional = makeTar([{ path: 'f', content: 'A', pax: { size: '1.5' } }]);
    for (const [what, archive] of [
      ['archive', fractional],
      ['layer', dockerSave([makeTar(await busyboxLayer()), fractional])],
    ] as const) {
      const last = (await importImage(`bad:fractional-${what}`, archive)).at(-1);
      assert.equal(last?.error?.code, 'invalid_argument', what);
    }
    assert.ok(!(await t.client.images()).some((i) => i.name.startsWith('bad:')));
    // The good first layer is the busybox one of the earlier test; nothing new stays behind.
    assert.deepEqual(await blobs(), before);
    assert.deepEqual(await scratchLeft(), []);
  });
});

describe('bounds', () => {
  test('what an upload or import unpacks to is bounded, not only what was sent: gzip bombs are refused and leave nothing', async () => {
    const small = await startTestWarren({ images: ['busybox:latest'], maxUploadBytes: 8 << 20 });
    try {
      // 64 MiB of zeros: about 64 KiB gzipped, under the limit on the wire.
      const bomb = gzipSync(makeTar([{ path: 'zeros', content: Buffer.alloc(64 << 20) }]));
      assert.ok(bomb.length < 1 << 20);
      const blobsBefore = await readdir(join(small.dataDir, 'layers', 'blobs'));
      const up = await http(small, 'POST', '/v1/layers?name=bomb/layer', bomb, { 'content-type': 'application/x-tar' });
      assert.equal(up.status, 413, up.text);
      assert.equal(errorCode(up), 'payload_too_large');
      const archive = gzipSync(dockerSave([makeTar([{ path: 'zeros', content: Buffer.alloc(64 << 20) }])]));
      const r = await http(small, 'POST', '/v1/images/import?name=bomb:1', archive, { 'content-type': 'application/x-tar' });
      const last = JSON.parse(r.text.trim().split('\n').at(-1) ?? '{}') as { error?: { code: string } };
      assert.equal(last.error?.code, 'payload_too_large', r.text);
      assert.deepEqual(await readdir(join(small.dataDir, 'layers', 'blobs')), blobsBefore);
      assert.deepEqual(await readdir(join(small.dataDir, 'layers', 'tmp')), []);
      assert.ok(!(await small.client.images()).some((i) => i.name === 'bomb:1'));
    } finally {
      await small.close();
    }
  });
});

describe('garbage collection', () => {
  test('deleting an image frees the layers nothing else uses, never one a running sandbox stands on', async () => {
    const layers = [makeTar(await busyboxLayer()), makeTar([{ path: 'gc/only-here', content: 'x' }])];
    const done = (await importImage('gc:1', dockerSave(layers))).at(-1);
    const [, own] = done?.image?.layers ?? [];
    assert.ok(own);
    const file = (d: string): string => join(t.dataDir, 'layers', 'blobs', `${d.slice(7)}.erofs`);
    const sb = await t.client.sandboxes.create({ image: 'gc:1' });
    // Refused while a live sandbox was made from it; forced, the name goes and the sandbox's layers stay.
    assert.equal(errorCode(await http(t, 'DELETE', `/v1/images/${encodeURIComponent('gc:1')}`)), 'conflict');
    assert.equal((await http(t, 'DELETE', `/v1/images/${encodeURIComponent('gc:1')}?force=1`)).status, 204);
    await stat(file(own));
    assert.equal((await sb.exec('cat /gc/only-here')).stdout, 'x');
    await sb.delete();
    // The next collection (here: deleting another name) frees it; shared busybox layer stays.
    await importImage('gc:2', dockerSave(layers.slice(0, 1)));
    assert.equal((await http(t, 'DELETE', `/v1/images/${encodeURIComponent('gc:2')}`)).status, 204);
    await assert.rejects(stat(file(own)));
    const appLayers = (await t.client.images()).find((i) => i.name === 'app:docker')?.layers ?? [];
    for (const d of appLayers) await stat(file(d));
    assert.equal(errorCode(await http(t, 'DELETE', `/v1/images/${encodeURIComponent('gc:2')}`)), 'not_found');
  });
});
