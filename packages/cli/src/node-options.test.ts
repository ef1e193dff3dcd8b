import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs } from 'node:util';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NODE_OPTIONS, nodeOptions, upFlags, upUsage } from './node-options.js';
import { usage } from './usage.js';

const parse = (args: string[]): Record<string, unknown> => parseArgs({ args, options: upFlags() }).values;

test('warren up with no flags: the defaults, and nothing set that the node should choose itself', async () => {
  const o = await nodeOptions(parse([]), {});
  assert.equal(o.port, 7070);
  assert.equal(o.host, '127.0.0.1');
  assert.equal(o.runtime, 'native');
  assert.equal(o.keepSandboxes, false);
  for (const k of ['network', 'swap', 'disk', 'blobStore', 'fn', 'overcommit', 'adminKey', 'edgeTransport', 'crashAt'] as const)
    assert.equal(o[k], undefined, k);
});

test('flags, their "no" forms and the environment land where the node reads them; a flag beats the environment', async () => {
  const o = await nodeOptions(
    parse([
      '--port',
      '0',
      '--dns-rate',
      '5',
      '--zram-swap-mib',
      '64',
      '--blob-url',
      'oci://r.example/layers',
      '--fn-pool',
      'img:python=2',
      '--fn-pool',
      'b=1',
      '--cpu-busy',
      '0.5',
      '--pull-registries',
      'r.example,,q.example:5000',
    ]),
    { WARREN_API_KEY: 'wk_x', WARREN_BLOB_USER: 'u', WARREN_EDGE_TRANSPORT: 'http' },
  );
  assert.equal(o.port, 0);
  assert.deepEqual(o.network, { dnsQueriesPerSecond: 5 });
  assert.deepEqual(o.swap, { zramMiB: 64 });
  assert.deepEqual(o.blobStore, { url: 'oci://r.example/layers', cacheMaxBytes: 20 * 2 ** 30, username: 'u', password: '' });
  assert.deepEqual(o.fn?.pools, [
    { image: 'img', language: 'python', size: 2 },
    { image: 'b', language: undefined, size: 1 },
  ]);
  assert.deepEqual(o.overcommit, { busy: 0.5 });
  assert.deepEqual(o.pullRegistries, ['r.example', 'q.example:5000']);
  assert.equal(o.adminKey, 'wk_x');
  assert.equal(o.edgeTransport, 'http');
  // Samepage merging is a timing channel between tenants: on only when asked for.
  assert.equal(o.microvm === false ? false : o.microvm?.ksm, undefined);
  const ksm = await nodeOptions(parse(['--ksm']), {});
  assert.equal(ksm.microvm === false ? false : ksm.microvm?.ksm, true);
  // microVMs' layers are mapped into their guests unless told not to.
  assert.equal(o.microvm === false ? false : o.microvm?.dax, undefined);
  const disks = await nodeOptions(parse(['--no-microvm-dax']), {});
  assert.equal(disks.microvm === false ? false : disks.microvm?.dax, false);
  const off = await nodeOptions(
    parse(['--no-network', '--dns-rate', '5', '--no-zram-swap', '--zram-swap-mib', '64', '--no-disk-quotas', '--sandbox-disk-gib', '9']),
    {},
  );
  assert.equal(off.network, false);
  assert.equal(off.swap, false);
  assert.equal(off.disk, false);
  // Without a blob store, its credentials go nowhere.
  assert.equal((await nodeOptions(parse([]), { WARREN_BLOB_KEY: 'k' })).blobStore, undefined);
  await assert.rejects(nodeOptions(parse(['--runtime', 'crun']), {}), /native or runc/);
  const vm = await nodeOptions(parse(['--default-backend', 'microvm', '--no-microvm']), {});
  assert.equal(vm.defaultBackend, 'microvm');
  assert.equal(vm.microvm, false);
  assert.equal((await nodeOptions(parse(['--default-backend', 'vm', '--no-vm']), {})).vm, false);
  await assert.rejects(nodeOptions(parse(['--default-backend', 'qemu']), {}), /container, microvm or vm/);
  await assert.rejects(nodeOptions(parse(['--dns-rate', '0']), {}), /at least 1/);
});

test('webhooks: URLs checked, the secret from the environment or a file (the file wins, trimmed); a secret without a webhook goes nowhere', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-opts-'));
  try {
    const file = join(dir, 'secret');
    await writeFile(file, 'from-the-file-0123456789\n');
    const env = { WARREN_WEBHOOK_SECRET: 'from-the-env-0123456789' };
    const hooks = ['--webhook', 'https://a.example/hook', '--webhook', 'http://127.0.0.1:9/h'];
    assert.deepEqual((await nodeOptions(parse(hooks), env)).webhooks, {
      urls: ['https://a.example/hook', 'http://127.0.0.1:9/h'],
      secret: env.WARREN_WEBHOOK_SECRET,
    });
    assert.equal((await nodeOptions(parse([...hooks, '--webhook-secret-file', file]), env)).webhooks?.secret, 'from-the-file-0123456789');
    assert.equal((await nodeOptions(parse(['--webhook-secret-file', file]), env)).webhooks, undefined);
    await assert.rejects(nodeOptions(parse(['--webhook', 'ftp://a.example/']), env), /http:\/\/ or https:\/\//);
    await assert.rejects(nodeOptions(parse(['--webhook', 'https://u:p@a.example/']), env), /credentials/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('warren help shows every flag of warren up, from the same table', () => {
  const help = usage();
  for (const n of NODE_OPTIONS) if (n.flag) assert.match(help, new RegExp(`--${n.flag}\\b`), n.flag);
  assert.ok(help.includes(upUsage()));
});

test('--endpoint NAME=URL, repeatable, for up and edge: checked where it is parsed; the secret and the rate land with it', async () => {
  const o = await nodeOptions(parse(['--endpoint', 'policy=http://10.0.0.5:8000', '--endpoint', 'judge=http://judge.lan/', '--endpoint-rate', '7']), {
    WARREN_ENDPOINT_SECRET: 's3cret',
  });
  assert.deepEqual(o.network, {
    endpoints: { policy: 'http://10.0.0.5:8000', judge: 'http://judge.lan/' },
    endpointSecret: 's3cret',
    endpointRequestsPerSecond: 7,
  });
  const edge = parseArgs({ args: ['--endpoint', 'p=http://127.0.0.1:1'], options: upFlags('edge') }).values;
  assert.deepEqual((await nodeOptions(edge, {}, 'edge')).network, { endpoints: { p: 'http://127.0.0.1:1' } });
  assert.equal(upFlags('server').endpoint, undefined, 'a control plane alone has no proxy: each edge names its own');
  await assert.rejects(nodeOptions(parse(['--endpoint', 'policy']), {}), /NAME=URL/);
  await assert.rejects(nodeOptions(parse(['--endpoint', 'Po_licy=http://a:1']), {}), /one DNS label/);
  await assert.rejects(nodeOptions(parse(['--endpoint', 'p=https://a:1']), {}), /only http:\/\//);
  await assert.rejects(nodeOptions(parse(['--endpoint', 'p=http://a:1/v1']), {}), /no path/);
  await assert.rejects(nodeOptions(parse(['--endpoint', 'p=http://a:1', '--endpoint', 'p=http://b:1']), {}), /given twice/);
  // --no-network: no endpoints either.
  assert.equal((await nodeOptions(parse(['--no-network', '--endpoint', 'p=http://a:1']), {})).network, false);
});
