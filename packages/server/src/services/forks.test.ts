import { test } from 'node:test';
import assert from 'node:assert/strict';
import { forkRecords, newForkBaseId } from './forks.js';
import { checkLayersAlone } from './images.js';
import type { SandboxRecord } from '../store/store.js';

const D = (c: string): string => `sha256:${c.repeat(64)}`;

test('a node answers the layers a fork stands on alone: each as it was but a fork base, which becomes any digest; anything else is the node’s fault', () => {
  const layers = [D('a'), 'fork:fb_000000000000000000000001', D('b'), 'fork:fb_000000000000000000000002'];
  assert.deepEqual(checkLayersAlone(layers, [D('a'), D('c'), D('b'), D('d')]), [D('a'), D('c'), D('b'), D('d')]);
  for (const bad of [
    undefined,
    'x',
    [D('a'), D('c'), D('b')],
    [D('a'), D('c'), D('b'), D('d'), D('e')],
    [D('e'), D('c'), D('b'), D('d')],
    [D('a'), 'fork:fb_000000000000000000000001', D('b'), D('d')],
    [D('a'), '../../etc/passwd', D('b'), D('d')],
    [D('a'), 7, D('b'), D('d')],
  ])
    assert.throws(() => checkLayersAlone(layers, bad), { code: 'unavailable' }, JSON.stringify(bad));
});

test('a fork’s children are the source’s but for their ids, fork base, lifetime, labels, lease and resources; the base id is a FORK_BASE_ID', () => {
  const src = {
    id: 'sb_src',
    tenant: 't',
    node: 'n1',
    state: 'running',
    backend: 'container',
    image: 'busybox:latest',
    layers: [D('a')],
    layerNames: [],
    labels: { job: 'x' },
    resources: { cpu: 1, memoryMiB: 512, pids: 256, diskMiB: null },
    env: { A: '1' },
    imageEnv: {},
    user: 'u',
    workdir: '/w',
    createdAt: 0,
    expiresAt: 1,
    lastActivityAt: 0,
    idleTimeoutSeconds: 60,
    error: null,
    requestId: 'r',
    network: { egress: 'deny' },
    lease: 'l_src',
    end: null,
  } satisfies SandboxRecord;
  const base = newForkBaseId();
  assert.match(base, /^fb_[a-z0-9]{24}$/);
  const kids = forkRecords(
    src,
    { labels: { job: 'y' }, resources: { cpu: 0.5 } },
    { baseId: base, ids: ['sb_1', 'sb_2'], now: 1000, defaultTtlSeconds: 60, lease: null },
  );
  assert.deepEqual(
    kids.map((k) => [
      k.id,
      k.state,
      k.layers,
      k.labels,
      k.resources.cpu,
      k.resources.memoryMiB,
      k.env,
      k.user,
      k.workdir,
      k.node,
      k.expiresAt,
      k.lease,
      k.requestId,
      k.idleTimeoutSeconds,
    ]),
    ['sb_1', 'sb_2'].map((id) => [id, 'creating', [D('a'), `fork:${base}`], { job: 'y' }, 0.5, 512, { A: '1' }, 'u', '/w', 'n1', 61_000, null, null, null]),
  );
  assert.deepEqual(forkRecords(src, {}, { baseId: base, ids: ['sb_3'], now: 0, defaultTtlSeconds: 5, lease: 'l_new' })[0]!.labels, { job: 'x' });
  // A child's memory request: the source's; the default share of a new limit; the one asked for, never over the limit.
  const request = (req: Parameters<typeof forkRecords>[1], from = src): number | undefined =>
    forkRecords(from, req, { baseId: base, ids: ['sb_4'], now: 0, defaultTtlSeconds: 5, lease: null })[0]!.resources.memoryRequestMiB;
  const asked = { ...src, resources: { ...src.resources, memoryRequestMiB: 40 } };
  assert.equal(request({}, asked), 40);
  assert.equal(request({}), 128);
  assert.equal(request({ resources: { memoryMiB: 1024 } }, asked), 256);
  assert.equal(request({ resources: { memoryMiB: 1024, memoryRequestMiB: 1000 } }, asked), 1000);
  assert.throws(() => request({ resources: { memoryRequestMiB: 600 } }), {
    code: 'invalid_argument',
    message: /memoryRequestMiB \(600\) is more than resources\.memoryMiB \(512\)/,
  });
});
