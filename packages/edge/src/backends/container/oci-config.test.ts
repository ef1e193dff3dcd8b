import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_ID_MAP } from '@warren/images';
import { INIT_PATH, buildOciConfig, runcRunArgs } from './oci-config.js';

const spec = { rootfs: '/r', platformDir: '/p', cgroupsPath: '/a/warren/sb_1', idMap: DEFAULT_ID_MAP, cpu: 1.5, memoryMiB: 512, pids: 256 };

test('limits come from the spec', () => {
  const c = buildOciConfig(spec) as { linux: { resources: { memory: { limit: number }; cpu: { quota: number; period: number }; pids: { limit: number } } } };
  assert.equal(c.linux.resources.memory.limit, 512 * 1024 * 1024);
  assert.equal(c.linux.resources.cpu.quota, 150_000);
  assert.equal(c.linux.resources.cpu.period, 100_000);
  assert.equal(c.linux.resources.pids.limit, 256);
});

test('root inside maps to the unprivileged host range, in every namespace', () => {
  const c = buildOciConfig(spec) as { linux: { uidMappings: Array<{ hostID: number; containerID: number }>; namespaces: Array<{ type: string }> } };
  assert.deepEqual(c.linux.uidMappings[0], { containerID: 0, hostID: 100000, size: 65536 });
  const ns = c.linux.namespaces.map((n) => n.type).sort();
  assert.deepEqual(ns, ['cgroup', 'ipc', 'mount', 'network', 'pid', 'user', 'uts']);
});

test('the init runs from the read-only platform mount', () => {
  const c = buildOciConfig(spec) as { process: { args: string[] }; mounts: Array<{ destination: string; options: string[]; source: string }> };
  assert.equal(c.process.args[0], INIT_PATH);
  const m = c.mounts.find((x) => x.destination === '/.warren');
  assert.ok(m);
  assert.equal(m.source, '/p');
  assert.ok(m.options.includes('ro'));
});

test('runc run hands exactly one extra fd and makes no session keyring', () => {
  assert.deepEqual(runcRunArgs('/run/x', 'sb_1', '/b'), [
    '--root',
    '/run/x',
    'run',
    '--detach',
    '--no-new-keyring',
    '--preserve-fds',
    '1',
    '--bundle',
    '/b',
    'sb_1',
  ]);
});

test('only a FnCall worker keeps CAP_SYS_ADMIN, and its init is told so', () => {
  type P = { process: { env: string[]; capabilities: { bounding: string[]; effective: string[] } } };
  const plain = buildOciConfig(spec) as P;
  assert.ok(!plain.process.capabilities.bounding.includes('CAP_SYS_ADMIN'));
  assert.ok(!plain.process.env.some((e) => e.startsWith('WARREN_FN')));
  const fn = buildOciConfig({ ...spec, fn: true }) as P;
  assert.ok(fn.process.capabilities.bounding.includes('CAP_SYS_ADMIN') && fn.process.capabilities.effective.includes('CAP_SYS_ADMIN'));
  assert.ok(fn.process.env.includes('WARREN_FN=1') && fn.process.env.includes(`WARREN_FN_TMPFS_KIB=${512 * 1024}`));
  // A worker sees its layers (top first) where its calls' roots are made from them; no other sandbox does.
  const layered = buildOciConfig({ ...spec, fn: true, fnLayers: ['/l/top', '/l/base'] }) as unknown as {
    mounts: Array<{ destination: string; source: string; options: string[] }>;
  };
  assert.deepEqual(
    layered.mounts.filter((m) => m.destination.startsWith('/.warren-layers/')).map((m) => [m.destination, m.source, m.options.includes('ro')]),
    [
      ['/.warren-layers/0', '/l/top', true],
      ['/.warren-layers/1', '/l/base', true],
    ],
  );
  const notFn = buildOciConfig({ ...spec, fnLayers: ['/l/top'] }) as unknown as { mounts: Array<{ destination: string }> };
  assert.ok(!notFn.mounts.some((m) => m.destination.startsWith('/.warren-layers')));
});

test('only the benchmark baseline drops the seccomp filter and the masked and read-only paths', () => {
  type C = { process: { env: string[] }; linux: { maskedPaths: string[]; readonlyPaths: string[] } };
  const on = buildOciConfig(spec) as C;
  assert.ok(on.linux.maskedPaths.includes('/proc/kcore') && on.linux.readonlyPaths.includes('/proc/sys'));
  assert.ok(!on.process.env.some((e) => e.startsWith('WARREN_UNHARDENED')));
  const off = buildOciConfig({ ...spec, unhardened: true }) as C;
  assert.deepEqual([off.linux.maskedPaths, off.linux.readonlyPaths], [[], []]);
  assert.ok(off.process.env.includes('WARREN_UNHARDENED=1'));
});
