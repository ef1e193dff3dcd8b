import type { CpuClass } from '@warren/api';
import type { IdMap } from '@warren/images';
import { cpuClassCgroupFiles } from '../../host/cgroups.js';
import { INIT_PATH, PLATFORM_MOUNT } from '../../init/platform.js';

/** What one container sandbox is made of; everything the OCI config needs, nothing else. */
export interface ContainerSpec {
  rootfs: string;
  /** Host directory mounted read-only at /.warren (warren-init and its helpers). */
  platformDir: string;
  cgroupsPath: string;
  idMap: IdMap;
  cpu: number;
  /**
   * How its CPU time is shared (default latency): batch is the least cpu.shares, and its init
   * makes itself, so every process of the sandbox, SCHED_IDLE (WARREN_CPU_CLASS=batch).
   */
  cpuClass?: CpuClass;
  memoryMiB: number;
  /**
   * Also cap memory + swap at the memory limit (where the kernel accounts swap): a running
   * sandbox cannot swap its way past its limit; pausing moves pages to swap within it.
   */
  capSwap?: boolean;
  pids: number;
  hostname?: string;
  /**
   * A network namespace to join (the edge prepares it); without one, a new empty one. Its /sys
   * is then mounted from the host side (the sandbox's user namespace does not own it).
   */
  netnsPath?: string;
  /**
   * A FnCall worker: its init keeps CAP_SYS_ADMIN in the sandbox's user namespace to give every
   * call namespaces and a writable layer of its own (native/fn.c); the calls themselves drop it.
   */
  fn?: boolean;
  /**
   * A FnCall worker's image layers (host paths, top first), mounted read-only at
   * {@link FN_LAYERS}/0, /1, … in the worker: each call's root is an overlay of these (and a
   * tmpfs) rather than of the worker's own root, so it is one overlay deep and its inode
   * numbers are what stat reports (native/fn.c).
   */
  fnLayers?: string[];
  /**
   * The hardening benchmark's baseline only (bench/src/hardening.ts): no seccomp filter, no
   * masked or read-only /proc and /sys paths. Never for a sandbox anyone uses.
   */
  unhardened?: boolean;
}

export { INIT_PATH, PLATFORM_MOUNT };
/** Where a FnCall worker sees its image's layers (never a call: its root is made of them). */
export const FN_LAYERS = '/.warren-layers';

const CAPS = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

/** Syscalls no sandbox process needs and an escaping one would: reading other processes' memory or fds. */
export const DENIED_SYSCALLS = [
  'ptrace',
  'process_vm_readv',
  'process_vm_writev',
  'pidfd_getfd',
  'kcmp',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'keyctl',
  'add_key',
  'request_key',
];

/**
 * The runc `config.json` of a container sandbox (pure; unit-tested). It has no seccomp section:
 * warren-init installs a fixed filter on itself before anything else runs (native/seccomp.c),
 * which spares runc compiling one with libseccomp at every start.
 */
export function buildOciConfig(spec: ContainerSpec): Record<string, unknown> {
  const period = 100_000;
  const caps = spec.fn ? [...CAPS, 'CAP_SYS_ADMIN'] : CAPS;
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: [INIT_PATH],
      env: [
        'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        'WARREN_LISTEN_FD=3',
        ...(spec.fn ? ['WARREN_FN=1', `WARREN_FN_TMPFS_KIB=${spec.memoryMiB * 1024}`] : []),
        ...(spec.unhardened ? ['WARREN_UNHARDENED=1'] : []),
        ...(spec.cpuClass === 'batch' ? ['WARREN_CPU_CLASS=batch'] : []),
      ],
      cwd: '/',
      capabilities: { bounding: caps, effective: caps, permitted: caps },
      // Below any sane host's hard limit: raising past it needs privileges the sandbox lacks.
      // RLIMIT_NICE 0: leaving SCHED_IDLE (a batch sandbox's) or a nice value below 0 needs
      // more, and raising a hard limit needs CAP_SYS_RESOURCE of the host's user namespace.
      rlimits: [
        { type: 'RLIMIT_NOFILE', hard: 4096, soft: 4096 },
        { type: 'RLIMIT_NICE', hard: 0, soft: 0 },
      ],
      noNewPrivileges: true,
    },
    root: { path: spec.rootfs, readonly: false },
    hostname: spec.hostname ?? 'sandbox',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      ...(spec.netnsPath ? [] : [{ destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] }]),
      { destination: PLATFORM_MOUNT, type: 'bind', source: spec.platformDir, options: ['bind', 'ro', 'nosuid', 'nodev'] },
      ...(spec.fn ? (spec.fnLayers ?? []) : []).map((source, i) => ({
        destination: `${FN_LAYERS}/${i}`,
        type: 'bind',
        source,
        options: ['bind', 'ro', 'nosuid', 'nodev'],
      })),
    ],
    linux: {
      uidMappings: [{ containerID: 0, hostID: spec.idMap.hostStart, size: spec.idMap.size }],
      gidMappings: [{ containerID: 0, hostID: spec.idMap.hostStart, size: spec.idMap.size }],
      namespaces: [
        { type: 'pid' },
        spec.netnsPath ? { type: 'network', path: spec.netnsPath } : { type: 'network' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'user' },
        { type: 'cgroup' },
      ],
      cgroupsPath: spec.cgroupsPath,
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        memory: spec.capSwap ? { limit: spec.memoryMiB * 1024 * 1024, swap: spec.memoryMiB * 1024 * 1024 } : { limit: spec.memoryMiB * 1024 * 1024 },
        cpu: { shares: cpuShares(spec.cpuClass ?? 'latency'), quota: Math.max(1000, Math.round(spec.cpu * period)), period },
        pids: { limit: spec.pids },
      },
      maskedPaths: spec.unhardened
        ? []
        : [
            '/proc/acpi',
            '/proc/asound',
            '/proc/kcore',
            '/proc/keys',
            '/proc/latency_stats',
            '/proc/timer_list',
            '/proc/timer_stats',
            '/proc/sched_debug',
            '/proc/scsi',
            '/proc/kpagecgroup',
            '/proc/kpageflags',
            '/proc/kpagecount',
            '/sys/firmware',
            '/sys/devices/virtual/powercap',
            '/sys/kernel/debug',
            '/sys/fs/cgroup',
          ],
      readonlyPaths: spec.unhardened ? [] : ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  };
}

/** The cgroup v1 cpu.shares of a CPU class. */
const cpuShares = (c: CpuClass): number => Number(cpuClassCgroupFiles(c, 1)[0]![1]);

/**
 * argv for `runc run -d` of a bundle, handing it the init socket as fd 3. No session keyring: every
 * sandbox's root is the same host uid, whose key quota (kernel.keys.maxkeys, 200) would cap a node
 * at a few hundred sandboxes; and the keyring is a channel between sandboxes.
 */
export function runcRunArgs(runcRoot: string, id: string, bundle: string): string[] {
  return ['--root', runcRoot, 'run', '--detach', '--no-new-keyring', '--preserve-fds', '1', '--bundle', bundle, id];
}

export function runcDeleteArgs(runcRoot: string, id: string): string[] {
  return ['--root', runcRoot, 'delete', '--force', id];
}
