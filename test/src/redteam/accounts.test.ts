import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Warren, type AuditEntry, type WarrenError } from '@warren/sdk';
import { errorCode, http, startTestWarren, storeContents, until, type TestWarren } from '../harness.js';
import { makeTar } from '../tar-writer.js';

describe('red team: accounts', () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren({ images: ['busybox:latest'], network: false });
  });
  after(async () => {
    await t?.close();
  });

  const keyFor = async (tenant: string, role: string): Promise<{ key: string; keyId: string }> => {
    const r = await http(t, 'POST', '/v1/keys', { tenant, role });
    assert.equal(r.status, 201, r.text);
    return r.json as { key: string; keyId: string };
  };
  const as = (key: string): TestWarren => ({ ...t, key });
  /** The names a key sees in GET /v1/images or /v1/layers. */
  const listed = async (key: string, what: 'images' | 'layers'): Promise<string[]> =>
    ((await http(as(key), 'GET', `/v1/${what}`)).json as Record<string, Array<{ name: string }>>)[what]!.map((x) => x.name);

  test('a runner key cannot make images; a builder key can; keys stay in their tenant; keys are stored hashed', async () => {
    const runner = await keyFor('acme', 'runner');
    const builder = await keyFor('acme', 'builder');
    const other = await keyFor('rival', 'builder');
    const sb = await new Warren({ url: t.url, apiKey: runner.key }).sandboxes.create({ image: 'busybox:latest' });
    try {
      const denied = await http(as(runner.key), 'POST', `/v1/sandboxes/${sb.id}/commit`, { name: 'acme/runner-made' });
      assert.equal(denied.status, 403);
      assert.equal(errorCode(denied), 'permission_denied');
      assert.equal(
        errorCode(await http(as(runner.key), 'POST', '/v1/layers?name=acme/x', Buffer.from(''), { 'content-type': 'application/x-tar' })),
        'permission_denied',
      );
      assert.equal(
        errorCode(await http(as(runner.key), 'POST', '/v1/images/import?name=acme/y', Buffer.from(''), { 'content-type': 'application/x-tar' })),
        'permission_denied',
      );
      const made = await http(as(builder.key), 'POST', `/v1/sandboxes/${sb.id}/commit`, { name: 'acme/builder-made' });
      assert.equal(made.status, 201, made.text);
      // Another tenant neither sees nor touches it, also once the owner's calls have taught this
      // replica where it runs (its commands and file calls then skip the store).
      assert.equal((await sb.exec('true')).exitCode, 0);
      assert.equal(errorCode(await http(as(other.key), 'GET', `/v1/sandboxes/${sb.id}`)), 'not_found');
      assert.equal(errorCode(await http(as(other.key), 'POST', `/v1/sandboxes/${sb.id}/exec`, { cmd: 'true' })), 'not_found');
      assert.equal(errorCode(await http(as(other.key), 'GET', `/v1/sandboxes/${sb.id}/files?path=/etc/hostname`)), 'not_found');
      assert.equal(errorCode(await http(as(other.key), 'PUT', `/v1/sandboxes/${sb.id}/files?path=/tmp/x`, Buffer.from('x'))), 'not_found');
      assert.equal(errorCode(await http(as(other.key), 'DELETE', `/v1/sandboxes/${sb.id}`)), 'not_found');
      // Neither the key nor anything that reverses to it is in the database.
      const db = await storeContents(t);
      for (const k of [runner.key, builder.key, other.key]) assert.ok(!db.includes(Buffer.from(k)), 'a plain key in the store');
      assert.equal(errorCode(await http(as(runner.key + 'x'), 'GET', '/v1/sandboxes')), 'unauthenticated');
    } finally {
      await sb.delete();
    }
  });

  test("a tenant's images are its own: others neither list, use, nor replace them", async () => {
    const maker = await keyFor('imgco', 'builder');
    const runner = await keyFor('imgco', 'runner');
    const rival = await keyFor('rivalco', 'builder');
    const sb = await new Warren({ url: t.url, apiKey: maker.key }).sandboxes.create({ image: 'busybox:latest' });
    try {
      await sb.exec('echo made > /made.txt');
      const made = await http(as(maker.key), 'POST', `/v1/sandboxes/${sb.id}/commit`, { name: 'imgco/tool' });
      assert.equal(made.status, 201, made.text);
      assert.equal((made.json as { tenant: string | null }).tenant, 'imgco');
      const names = (key: string): Promise<string[]> => listed(key, 'images');
      assert.ok((await names(runner.key)).includes('imgco/tool'));
      assert.ok(!(await names(rival.key)).includes('imgco/tool'));
      assert.ok((await names(rival.key)).includes('busybox:latest'), 'default images are everyone’s');
      assert.ok((await names(t.key)).includes('imgco/tool'), 'an admin sees all');
      // The same tenant's runner uses it; another tenant cannot, not even through FnCall.
      const mine = await new Warren({ url: t.url, apiKey: runner.key }).sandboxes.create({ image: 'imgco/tool' });
      assert.equal((await mine.exec('cat /made.txt')).stdout, 'made\n');
      await mine.delete();
      assert.equal(errorCode(await http(as(rival.key), 'POST', '/v1/sandboxes', { image: 'imgco/tool' })), 'not_found');
      assert.equal(errorCode(await http(as(rival.key), 'POST', '/v1/fn/run', { language: 'bash', code: 'true', image: 'imgco/tool' })), 'not_found');
      // Nor replace it (or a default image) under the same name.
      const other = await new Warren({ url: t.url, apiKey: rival.key }).sandboxes.create({ image: 'busybox:latest' });
      assert.equal(errorCode(await http(as(rival.key), 'POST', `/v1/sandboxes/${other.id}/commit`, { name: 'imgco/tool' })), 'permission_denied');
      assert.equal(errorCode(await http(as(rival.key), 'POST', `/v1/sandboxes/${other.id}/commit`, { name: 'busybox:latest' })), 'permission_denied');
      await other.delete();
    } finally {
      await sb.delete();
    }
  });

  test("a tenant's named layers are its own: others neither list, stack, publish by digest, nor replace them", async () => {
    const maker = await keyFor('layco', 'builder');
    const runner = await keyFor('layco', 'runner');
    const rival = await keyFor('rivallay', 'builder');
    const tar = makeTar([{ path: 'answers/key.txt', content: 'the-answer\n' }]);
    const up = await http(as(maker.key), 'POST', '/v1/layers?name=layco/answers', tar, { 'content-type': 'application/x-tar' });
    assert.equal(up.status, 201, up.text);
    const layer = up.json as { digest: string; tenant: string | null };
    assert.equal(layer.tenant, 'layco');
    const names = (key: string): Promise<string[]> => listed(key, 'layers');
    assert.ok((await names(runner.key)).includes('layco/answers'));
    assert.ok(!(await names(rival.key)).includes('layco/answers'));
    assert.ok((await names(t.key)).includes('layco/answers'), 'an admin sees all');
    // Its tenant stacks it; another tenant gets not_found, by name and by digest.
    const mine = await new Warren({ url: t.url, apiKey: runner.key }).sandboxes.create({ image: 'busybox:latest', layers: ['layco/answers'] });
    try {
      assert.equal((await mine.exec('cat /answers/key.txt')).stdout, 'the-answer\n');
    } finally {
      await mine.delete();
    }
    for (const ref of ['layco/answers', layer.digest])
      assert.equal(errorCode(await http(as(rival.key), 'POST', '/v1/sandboxes', { image: 'busybox:latest', layers: [ref] })), 'not_found', ref);
    // Nor is the name taken over; its own tenant replaces it.
    const other = makeTar([{ path: 'answers/key.txt', content: 'forged\n' }]);
    assert.equal(
      errorCode(await http(as(rival.key), 'POST', '/v1/layers?name=layco/answers', other, { 'content-type': 'application/x-tar' })),
      'permission_denied',
    );
    const again = await http(as(maker.key), 'POST', '/v1/layers?name=layco/answers', other, { 'content-type': 'application/x-tar' });
    assert.equal(again.status, 201, again.text);
    assert.equal((await http(t, 'DELETE', `/v1/layers/${encodeURIComponent('layco/answers')}`)).status, 204);
  });

  test("naming another tenant's diffID in an import without its bytes gets nothing of that tenant's layer", async () => {
    const owner = await keyFor('diffco', 'builder');
    const thief = await keyFor('diffthief', 'builder');
    const secret = makeTar([{ path: 'answers/secret.txt', content: 'private-answer\n' }]);
    const up = await http(as(owner.key), 'POST', '/v1/layers?name=diffco/secret', secret, { 'content-type': 'application/x-tar' });
    assert.equal(up.status, 201, up.text);
    const layer = up.json as { digest: string };
    // The thief knows the tar's diffID (its sha256), not necessarily its bytes: its archive names
    // that diffID for a layer whose bytes are something else.
    const diffId = `sha256:${createHash('sha256').update(secret).digest('hex')}`;
    const decoy = makeTar([{ path: 'decoy.txt', content: 'nothing\n' }]);
    const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: [diffId] } }));
    /** A `docker save` archive of one layer under that config. */
    const archive = (layerTar: Buffer): Buffer =>
      makeTar([
        { path: 'config.json', content: config },
        { path: 'l0/', type: 'dir' },
        { path: 'l0/layer.tar', content: layerTar },
        { path: 'manifest.json', content: JSON.stringify([{ Config: 'config.json', Layers: ['l0/layer.tar'] }]) },
      ]);
    const r = await http(as(thief.key), 'POST', '/v1/images/import?name=diffthief/img', archive(decoy), { 'content-type': 'application/x-tar' });
    const last = JSON.parse(r.text.trim().split('\n').at(-1) ?? '{}') as { type: string; image?: { layers: string[] }; error?: { code: string } };
    assert.notEqual(last.type, 'done', `the import must not succeed with a layer it did not send: ${r.text}`);
    assert.equal(last.error?.code, 'invalid_argument', r.text);
    assert.ok(!(await listed(thief.key, 'images')).includes('diffthief/img'));
    // The owner's own import of the same bytes still reuses the layer it already has.
    const mine = await http(as(owner.key), 'POST', '/v1/images/import?name=diffco/img', archive(secret), { 'content-type': 'application/x-tar' });
    const done = JSON.parse(mine.text.trim().split('\n').at(-1) ?? '{}') as { image?: { layers: string[] } };
    assert.deepEqual(done.image?.layers, [layer.digest], mine.text);
  });

  test('a revoked key stops working at once, and the revocation is audited; only an admin revokes', async () => {
    const k = await keyFor('revokeco', 'builder');
    const other = await keyFor('revokeco', 'user');
    assert.equal((await http(as(k.key), 'GET', '/v1/sandboxes')).status, 200, 'works (and is cached) before');
    assert.equal(errorCode(await http(as(other.key), 'DELETE', `/v1/keys/${k.keyId}`)), 'permission_denied');
    assert.equal((await http(t, 'DELETE', `/v1/keys/${k.keyId}`)).status, 204);
    assert.equal(errorCode(await http(as(k.key), 'GET', '/v1/sandboxes')), 'unauthenticated');
    assert.equal((await http(t, 'DELETE', `/v1/keys/${k.keyId}`)).status, 204, 'idempotent');
    assert.equal((await http(as(other.key), 'GET', '/v1/sandboxes')).status, 200, 'other keys of the tenant keep working');
    const audit = (await http(t, 'GET', '/v1/audit?limit=20')).json as { entries: AuditEntry[] };
    assert.ok(audit.entries.some((e) => e.method === 'DELETE' && e.path === `/v1/keys/${k.keyId}` && e.status === 204 && e.keyId === 'admin'));
  });

  test("/metrics names every tenant's sandboxes: it needs an admin key", async () => {
    const user = await keyFor('metricsco', 'user');
    assert.equal((await fetch(`${t.url}/metrics`)).status, 401);
    assert.equal((await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${user.key}` } })).status, 403);
    const ok = await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${t.key}` } });
    assert.equal(ok.status, 200);
    assert.match(await ok.text(), /warren_sandboxes /);
  });

  test("a warm pool's sandboxes count against its key's quota, and its refills stay within it", async () => {
    const r = await http(t, 'POST', '/v1/keys', { tenant: 'poolquota', role: 'user', quota: { sandboxes: 3 } });
    assert.equal(r.status, 201, r.text);
    const w = new Warren({ url: t.url, apiKey: (r.json as { key: string }).key });
    const spec = { image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 } };
    const pool = await w.pools.create({ ...spec, size: 2 });
    try {
      // A pool of 2 more would hold more than the quota.
      await assert.rejects(w.pools.create({ ...spec, size: 2 }), (e: WarrenError) => e.code === 'resource_exhausted');
      await until(async () => (await w.pools.list())[0]?.ready === 2);
      // One sandbox of another size fits (2 in the pool + 1); a second does not.
      const other = await w.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.2, memoryMiB: 64 } });
      await assert.rejects(
        w.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.2, memoryMiB: 64 } }),
        (e: WarrenError) => e.code === 'resource_exhausted',
      );
      // A claim moves a pool sandbox to the caller (no more quota); the refill would pass it.
      const claimed = await w.sandboxes.create(spec);
      await until(async () => /quota/.test((await w.pools.list())[0]?.lastError ?? ''), 10_000);
      const after = (await w.pools.list())[0]!;
      assert.equal(after.ready, 1, JSON.stringify(after));
      assert.match(after.lastError ?? '', /quota/);
      await claimed.delete();
      await other.delete();
    } finally {
      await w.pools.delete(pool.id);
    }
  });

  test('a burst of creates at once cannot pass a quota: the count is checked where the sandbox is recorded', async () => {
    const r = await http(t, 'POST', '/v1/keys', { tenant: 'burstquota', role: 'user', quota: { sandboxes: 2 } });
    assert.equal(r.status, 201, r.text);
    const w = new Warren({ url: t.url, apiKey: (r.json as { key: string }).key });
    const spec = { image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 32 } };
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => w.sandboxes.create(spec)));
    try {
      const made = results.filter((x) => x.status === 'fulfilled');
      const refused = results.filter((x): x is PromiseRejectedResult => x.status === 'rejected');
      assert.equal(made.length, 2, `made ${made.length} of a quota of 2`);
      for (const x of refused) assert.equal((x.reason as WarrenError).code, 'resource_exhausted', String(x.reason));
      assert.equal((await w.sandboxes.list()).sandboxes.length, 2);
    } finally {
      for (const x of results) if (x.status === 'fulfilled') await x.value.delete();
    }
  });

  test('every mutating call is in the audit log with its key, sandbox and outcome; only admins read it', async () => {
    const runner = await keyFor('audited', 'runner');
    const w = new Warren({ url: t.url, apiKey: runner.key });
    const sb = await w.sandboxes.create({ image: 'busybox:latest' });
    await sb.exec('echo hi');
    const refused = await http(as(runner.key), 'POST', `/v1/sandboxes/${sb.id}/commit`, { name: 'audited/x' });
    assert.equal(refused.status, 403);
    await sb.delete();
    await http(as('wk_not-a-key'), 'POST', '/v1/sandboxes', { image: 'busybox:latest' });
    assert.equal(errorCode(await http(as(runner.key), 'GET', '/v1/audit')), 'permission_denied');
    const r = await http(t, 'GET', '/v1/audit?tenant=audited&limit=50');
    assert.equal(r.status, 200, r.text);
    const entries = (r.json as { entries: AuditEntry[] }).entries;
    const mine = entries.filter((e) => e.sandbox === sb.id).reverse();
    assert.deepEqual(
      mine.map((e) => [e.keyId, e.method, e.path.replace(sb.id, 'ID'), e.status, e.code]),
      [
        [runner.keyId, 'POST', '/v1/sandboxes', 201, null],
        [runner.keyId, 'POST', '/v1/sandboxes/ID/exec', 200, null],
        [runner.keyId, 'POST', '/v1/sandboxes/ID/commit', 403, 'permission_denied'],
        [runner.keyId, 'DELETE', '/v1/sandboxes/ID', 204, null],
      ],
    );
    assert.ok(mine.every((e) => e.tenant === 'audited' && !Number.isNaN(Date.parse(e.at))));
    const anon = (await http(t, 'GET', '/v1/audit?limit=20')).json as { entries: AuditEntry[] };
    assert.ok(anon.entries.some((e) => e.keyId === null && e.status === 401 && e.code === 'unauthenticated'));
  });
});

describe('red team: fail closed', () => {
  let t: TestWarren;
  before(async () => {
    // A node whose sandboxes' directory has no quotas (`--no-disk-quotas`).
    t = await startTestWarren({ images: ['busybox:latest'], network: false, disk: false });
  });
  after(async () => {
    await t?.close();
  });

  test('a limit the node cannot enforce is refused, not ignored; network rules it cannot apply too', async () => {
    const disk = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', resources: { diskMiB: 100 } });
    assert.equal(errorCode(disk), 'invalid_argument');
    assert.match(disk.text, /diskMiB/);
    // This node runs without sandbox networking: rules that open egress are refused.
    const net = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', network: { egress: 'deny', allow: ['pypi.example'] } });
    assert.equal(errorCode(net), 'invalid_argument');
    assert.equal(((await http(t, 'GET', '/v1/sandboxes')).json as { sandboxes: unknown[] }).sandboxes.length, 0);
  });
});
