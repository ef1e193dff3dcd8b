import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_ID_MAP } from '@warren/images';
import { buildOciConfig } from './oci-config.js';
import { capabilityMask, cgroupWrites, mountFlags, spawnFields } from './spawn-spec.js';

const config = buildOciConfig({
  rootfs: '/d/rootfs',
  platformDir: '/p',
  cgroupsPath: '/own/warren/sb_1',
  idMap: DEFAULT_ID_MAP,
  cpu: 0.5,
  memoryMiB: 64,
  pids: 100,
});
const paths = { socket: '/d/init.sock', log: '/d/init.log', cgroupRoot: '/sys/fs/cgroup' };
type Config = Parameters<typeof spawnFields>[0];
const fields = (c: unknown = config): string[] => spawnFields(c as Config, paths);
const values = (f: string[], key: string): string[] => f.filter((x) => x.startsWith(`${key}=`)).map((x) => x.slice(key.length + 1));

test('OCI mount options become MS_* flags; the rest is file-system data', () => {
  assert.deepEqual(mountFlags(['nosuid', 'noexec', 'nodev']), { flags: 2 | 8 | 4, data: '' });
  assert.deepEqual(mountFlags(['rbind', 'ro', 'rprivate']), { flags: 4096 | 16384 | 1, data: '' });
  assert.deepEqual(mountFlags(['nosuid', 'newinstance', 'ptmxmode=0666']), { flags: 2, data: 'newinstance,ptmxmode=0666' });
});

test('capability names map to their kernel bit numbers', () => {
  assert.equal(capabilityMask(['CAP_CHOWN']), 1n);
  assert.equal(capabilityMask(['CAP_SYS_ADMIN']), 1n << 21n);
  assert.equal(capabilityMask(['CAP_CHECKPOINT_RESTORE']), 1n << 40n);
  assert.throws(() => capabilityMask(['CAP_EVERYTHING']), /unknown capability/);
});

test('the sandbox config becomes the fields runc would have honoured', () => {
  const f = fields();
  assert.deepEqual(values(f, 'root'), ['/d/rootfs']);
  assert.deepEqual(values(f, 'ns')[0]?.split(',').sort(), ['cgroup', 'ipc', 'mnt', 'net', 'pid', 'user', 'uts']);
  assert.deepEqual(values(f, 'uidmap'), ['0:100000:65536']);
  // Docker's default capability set, no more.
  assert.deepEqual(values(f, 'caps'), ['a80425fb']);
  assert.deepEqual(values(f, 'nnp'), ['1']);
  // RLIMIT_NICE 0: nothing inside may leave SCHED_IDLE (a batch sandbox's) or go below nice 0.
  assert.deepEqual(values(f, 'rlimit'), ['7:4096:4096', '13:0:0']);
  assert.deepEqual(values(f, 'arg'), ['/.warren/warren-init']);
  assert.ok(values(f, 'env').includes('WARREN_LISTEN_FD=3'));
  const platform = values(f, 'mount').find((m) => m.startsWith('/.warren\x1f'));
  // bind | ro | nosuid | nodev, from the host's platform dir
  assert.equal(platform, ['/.warren', 'none', '/p', String(4096 | 1 | 2 | 4), ''].join('\x1f'));
  assert.ok(values(f, 'mask').includes('/proc/keys'));
  assert.ok(values(f, 'ro').includes('/proc/sys'));
});

test('superblocks a sandbox does without: /dev/shm is a directory of the /dev tmpfs, masked directories share the host empty one', () => {
  const f = fields();
  const mounts = values(f, 'mount').map((m) => m.split('\x1f').slice(0, 2).join(' '));
  assert.ok(mounts.includes('/dev tmpfs'));
  assert.ok(!mounts.some((m) => m.startsWith('/dev/shm')));
  // nosuid | nodev | noexec, mode 1777, after /dev (in the mounts' order).
  assert.deepEqual(values(f, 'dir'), [['/dev/shm', '1777', String(2 | 4 | 8)].join('\x1f')]);
  assert.ok(f.indexOf(`dir=${values(f, 'dir')[0]}`) > f.findIndex((x) => x.startsWith('mount=/dev\x1f')));
  assert.deepEqual(values(f, 'maskdir'), []);
  assert.deepEqual(values(spawnFields(config as unknown as Config, { ...paths, maskDir: '/d/mnt/empty' }), 'maskdir'), ['/d/mnt/empty']);
  // A tmpfs not inside another stays a mount of its own.
  const alone = { ...config, mounts: [{ destination: '/scratch', type: 'tmpfs', source: 'tmpfs', options: ['mode=700'] }] } as unknown as Config;
  assert.deepEqual(values(spawnFields(alone, paths), 'dir'), []);
  assert.equal(values(spawnFields(alone, paths), 'mount').length, 1);
});

test('limits become cgroup writes under the sandbox cgroup of each controller, deny-all devices first', () => {
  const w = cgroupWrites((config as { linux: Config['linux'] }).linux.resources, (c) => `/cg/${c}/x`);
  // The default period (100 ms) is a new cgroup's already: not written.
  assert.deepEqual(w.slice(0, 4), [
    ['/cg/memory/x/memory.limit_in_bytes', String(64 * 1024 * 1024)],
    ['/cg/cpu/x/cpu.shares', '1024'],
    ['/cg/cpu/x/cpu.cfs_quota_us', '50000'],
    ['/cg/pids/x/pids.max', '100'],
  ]);
  assert.deepEqual(w[4], ['/cg/devices/x/devices.deny', 'a']);
  assert.ok(w.slice(5).every(([file]) => file === '/cg/devices/x/devices.allow'));
  const period = cgroupWrites({ cpu: { period: 50_000, quota: 25_000 } }, (c) => `/cg/${c}/x`);
  assert.deepEqual(period, [
    ['/cg/cpu/x/cpu.cfs_period_us', '50000'],
    ['/cg/cpu/x/cpu.cfs_quota_us', '25000'],
  ]);
  assert.ok(values(fields(), 'cg').includes('/sys/fs/cgroup/memory/own/warren/sb_1'));
  // Memory + swap capped at the memory limit, written after it (the kernel refuses it below).
  const capped = cgroupWrites({ memory: { limit: 1 << 26, swap: 1 << 26 } }, (c) => `/cg/${c}/x`);
  assert.deepEqual(capped, [
    ['/cg/memory/x/memory.limit_in_bytes', String(1 << 26)],
    ['/cg/memory/x/memory.memsw.limit_in_bytes', String(1 << 26)],
  ]);
});

test('a batch sandbox: the least cpu.shares, and its init told to make itself SCHED_IDLE; a latency one neither', () => {
  const batch = buildOciConfig({
    rootfs: '/d/rootfs',
    platformDir: '/p',
    cgroupsPath: '/own/warren/sb_2',
    idMap: DEFAULT_ID_MAP,
    cpu: 1,
    cpuClass: 'batch',
    memoryMiB: 64,
    pids: 100,
  });
  const f = fields(batch);
  assert.ok(values(f, 'cgw').includes('/sys/fs/cgroup/cpu/own/warren/sb_2/cpu.shares=2'));
  assert.ok(values(f, 'env').includes('WARREN_CPU_CLASS=batch'));
  assert.ok(values(f, 'rlimit').includes('13:0:0'));
  assert.ok(values(fields(), 'cgw').includes('/sys/fs/cgroup/cpu/own/warren/sb_1/cpu.shares=1024'));
  assert.ok(!values(fields(), 'env').some((e) => e.startsWith('WARREN_CPU_CLASS=')));
});

test('what the spawner cannot honour is refused, not dropped', () => {
  const clone = (): Config => JSON.parse(JSON.stringify(config)) as Config;
  const withSeccomp = { ...clone(), linux: { ...clone().linux, seccomp: { defaultAction: 'SCMP_ACT_ALLOW' } } };
  assert.throws(() => fields(withSeccomp), /seccomp/);
  const joined = clone();
  joined.linux.namespaces.push({ type: 'ipc', path: '/run/ipc/x' });
  assert.throws(() => fields(joined), /existing namespace/);
  // A network namespace the edge prepared is joined by path, not made.
  const net = clone();
  net.linux.namespaces = net.linux.namespaces.map((n) => (n.type === 'network' ? { type: 'network', path: '/proc/1/fd/5' } : n));
  const f = fields(net);
  assert.deepEqual(values(f, 'netns'), ['/proc/1/fd/5']);
  assert.ok(!values(f, 'ns')[0]!.split(',').includes('net'));
  const user = clone();
  user.process.user.uid = 1000;
  assert.throws(() => fields(user), /user/);
  const caps = clone();
  caps.process.capabilities = { ...caps.process.capabilities, ambient: ['CAP_KILL'] };
  assert.throws(() => fields(caps), /capability/);
});

test('lower layers are idmapped into the sandbox range only when it differs from theirs', () => {
  const overlay = { lower: ['/l/a', '/l/b'], upper: '/d/upper', work: '/d/work', lowerBase: '/l' };
  const f = (layerMap?: { from: number; to: number; size: number }): string[] => spawnFields(config as unknown as Config, { ...paths, overlay, layerMap });
  assert.deepEqual(values(f({ from: 100000, to: 2 ** 30, size: 65536 }), 'layermap'), [`100000:${2 ** 30}:65536`]);
  assert.deepEqual(values(f({ from: 100000, to: 100000, size: 65536 }), 'layermap'), []);
  assert.deepEqual(values(f(), 'layermap'), []);
});

test('the CPU quota can be left for the caller to write; everything else is still written', () => {
  const all = fields();
  const without = spawnFields(config as unknown as Config, { ...paths, withoutCpuQuota: true });
  assert.deepEqual(
    all.filter((f) => !f.includes('/cpu.cfs_quota_us=')),
    without,
  );
  assert.equal(all.length, without.length + 1);
});
