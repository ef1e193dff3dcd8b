import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import { SANDBOX_CONTROLLERS } from '../../host/cgroups.js';

/**
 * The native spawner (native/spawn.c, through warren-hostd) starts the same container runc
 * would from the same OCI config: this turns that config into the spawner's fields (pure;
 * unit-tested), and refuses any part of a config it cannot honour rather than dropping it.
 */

/** The OCI config parts the spawner reads (what buildOciConfig makes). */
interface OciSubset {
  process: {
    args: string[];
    env: string[];
    cwd: string;
    capabilities?: { bounding?: string[]; effective?: string[]; permitted?: string[]; inheritable?: string[]; ambient?: string[] };
    rlimits?: Array<{ type: string; soft: number; hard: number }>;
    noNewPrivileges?: boolean;
    user: { uid: number; gid: number };
    terminal?: boolean;
  };
  root: { path: string; readonly?: boolean };
  hostname?: string;
  mounts: Array<{ destination: string; type: string; source: string; options?: string[] }>;
  linux: {
    uidMappings: Array<{ containerID: number; hostID: number; size: number }>;
    gidMappings: Array<{ containerID: number; hostID: number; size: number }>;
    namespaces: Array<{ type: string; path?: string }>;
    cgroupsPath: string;
    resources?: {
      devices?: Array<{ allow: boolean; access?: string; type?: string; major?: number; minor?: number }>;
      memory?: { limit?: number; swap?: number };
      cpu?: { shares?: number; quota?: number; period?: number };
      pids?: { limit?: number };
    };
    maskedPaths?: string[];
    readonlyPaths?: string[];
    seccomp?: unknown;
  };
}

export { SANDBOX_CONTROLLERS } from '../../host/cgroups.js';

/** The MS_* flags mounts may carry: warren-hostd refuses any other (MOUNT_FLAGS in native/spawn-spec.c). */
const MS = {
  RDONLY: 1,
  NOSUID: 2,
  NODEV: 4,
  NOEXEC: 8,
  SYNCHRONOUS: 16,
  DIRSYNC: 128,
  NOATIME: 1024,
  NODIRATIME: 2048,
  BIND: 4096,
  REC: 16384,
  RELATIME: 1 << 21,
  STRICTATIME: 1 << 24,
} as const;

const FLAG_OPTIONS: Record<string, number> = {
  ro: MS.RDONLY,
  rw: 0,
  nosuid: MS.NOSUID,
  nodev: MS.NODEV,
  noexec: MS.NOEXEC,
  sync: MS.SYNCHRONOUS,
  dirsync: MS.DIRSYNC,
  noatime: MS.NOATIME,
  nodiratime: MS.NODIRATIME,
  relatime: MS.RELATIME,
  strictatime: MS.STRICTATIME,
  bind: MS.BIND,
  rbind: MS.BIND | MS.REC,
};

/** x86_64/generic RLIMIT_* numbers. */
const RLIMITS: Record<string, number> = {
  RLIMIT_CPU: 0,
  RLIMIT_FSIZE: 1,
  RLIMIT_DATA: 2,
  RLIMIT_STACK: 3,
  RLIMIT_CORE: 4,
  RLIMIT_RSS: 5,
  RLIMIT_NPROC: 6,
  RLIMIT_NOFILE: 7,
  RLIMIT_MEMLOCK: 8,
  RLIMIT_AS: 9,
  RLIMIT_LOCKS: 10,
  RLIMIT_SIGPENDING: 11,
  RLIMIT_MSGQUEUE: 12,
  RLIMIT_NICE: 13,
  RLIMIT_RTPRIO: 14,
  RLIMIT_RTTIME: 15,
};

const CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_LINUX_IMMUTABLE',
  'CAP_NET_BIND_SERVICE',
  'CAP_NET_BROADCAST',
  'CAP_NET_ADMIN',
  'CAP_NET_RAW',
  'CAP_IPC_LOCK',
  'CAP_IPC_OWNER',
  'CAP_SYS_MODULE',
  'CAP_SYS_RAWIO',
  'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE',
  'CAP_SYS_PACCT',
  'CAP_SYS_ADMIN',
  'CAP_SYS_BOOT',
  'CAP_SYS_NICE',
  'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME',
  'CAP_SYS_TTY_CONFIG',
  'CAP_MKNOD',
  'CAP_LEASE',
  'CAP_AUDIT_WRITE',
  'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP',
  'CAP_MAC_OVERRIDE',
  'CAP_MAC_ADMIN',
  'CAP_SYSLOG',
  'CAP_WAKE_ALARM',
  'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ',
  'CAP_PERFMON',
  'CAP_BPF',
  'CAP_CHECKPOINT_RESTORE',
];

const NAMESPACES: Record<string, string> = { user: 'user', mount: 'mnt', pid: 'pid', ipc: 'ipc', uts: 'uts', network: 'net', cgroup: 'cgroup' };

/** The device nodes every sandbox gets (bound from the host: a user namespace cannot mknod). */
export const DEFAULT_DEVICES = ['null', 'zero', 'full', 'random', 'urandom', 'tty'];

/** What the devices cgroup allows: those nodes plus the sandbox's own ptys. */
const DEVICE_RULES = ['c 1:3 rwm', 'c 1:5 rwm', 'c 1:7 rwm', 'c 1:8 rwm', 'c 1:9 rwm', 'c 5:0 rwm', 'c 5:2 rwm', 'c 136:* rwm'];

const LINKS: Array<[string, string]> = [
  ['/proc/self/fd', '/dev/fd'],
  ['/proc/self/fd/0', '/dev/stdin'],
  ['/proc/self/fd/1', '/dev/stdout'],
  ['/proc/self/fd/2', '/dev/stderr'],
  ['pts/ptmx', '/dev/ptmx'],
];

const US = '\x1f';

function unsupported(what: string): never {
  throw new WarrenError('internal', `the native spawner cannot start this container: ${what}`);
}

/** OCI mount options → MS_* flags and the data string the file system parses. */
export function mountFlags(options: string[] = []): { flags: number; data: string } {
  let flags = 0;
  const data: string[] = [];
  for (const o of options) {
    const f = FLAG_OPTIONS[o];
    if (f !== undefined) flags |= f;
    else if (['private', 'rprivate', 'slave', 'rslave', 'shared', 'rshared', 'unbindable', 'runbindable'].includes(o)) continue;
    else data.push(o);
  }
  return { flags, data: data.join(',') };
}

export function capabilityMask(names: string[]): bigint {
  let mask = 0n;
  for (const n of names) {
    const i = CAPABILITIES.indexOf(n);
    if (i < 0) unsupported(`unknown capability ${n}`);
    mask |= 1n << BigInt(i);
  }
  return mask;
}

/** The kernel's CFS period of a new cgroup (cpu.cfs_period_us). */
const DEFAULT_CFS_PERIOD_US = 100_000;

/** The cgroup files to write, in order, for a config's resources (`dirOf`: a controller's directory, no trailing slash). */
export function cgroupWrites(resources: OciSubset['linux']['resources'] = {}, dirOf: (controller: string) => string): Array<[string, string]> {
  const w: Array<[string, string]> = [];
  if (resources.memory?.limit !== undefined) w.push([`${dirOf('memory')}/memory.limit_in_bytes`, String(resources.memory.limit)]);
  // After the memory limit: the kernel refuses a memory+swap limit below it.
  if (resources.memory?.swap !== undefined) w.push([`${dirOf('memory')}/memory.memsw.limit_in_bytes`, String(resources.memory.swap)]);
  if (resources.cpu?.shares !== undefined) w.push([`${dirOf('cpu')}/cpu.shares`, String(resources.cpu.shares)]);
  // A new cgroup has the default period already, and each write of it walks every task group
  // of the host (tg_set_cfs_bandwidth): 2.7 % of the machine at 4,500 sandboxes, one per create.
  if (resources.cpu?.period !== undefined && resources.cpu.period !== DEFAULT_CFS_PERIOD_US)
    w.push([`${dirOf('cpu')}/cpu.cfs_period_us`, String(resources.cpu.period)]);
  if (resources.cpu?.quota !== undefined) w.push([`${dirOf('cpu')}/cpu.cfs_quota_us`, String(resources.cpu.quota)]);
  if (resources.pids?.limit !== undefined) w.push([`${dirOf('pids')}/pids.max`, String(resources.pids.limit)]);
  const devices = resources.devices ?? [];
  if (devices.length > 0) {
    if (devices.length !== 1 || devices[0]?.allow !== false || devices[0].type !== undefined || devices[0].major !== undefined)
      unsupported('device rules other than "deny all"');
    w.push([`${dirOf('devices')}/devices.deny`, 'a']);
    for (const rule of DEVICE_RULES) w.push([`${dirOf('devices')}/devices.allow`, rule]);
  }
  return w;
}

export interface SpawnPaths {
  /** Where the init socket is bound (host path). */
  socket: string;
  /** The init's stderr. */
  log: string;
  /** Mount point of the cgroup v1 hierarchies, normally /sys/fs/cgroup. */
  cgroupRoot: string;
  /**
   * The overlay to mount on the root in the spawn's own mount namespace (lower: top layer
   * first). Absent: the root is already mounted.
   */
  overlay?: { lower: string[]; upper: string; work: string; lowerBase?: string };
  /**
   * The lower layers are stored with ids from `from` on and the sandbox's ids start at `to`: the
   * spawner mounts each idmapped (in its own mount namespace) before the overlay.
   */
  layerMap?: { from: number; to: number; size: number };
  /** Leave the CPU quota unwritten (the caller writes it once the platform's set-up is done). */
  withoutCpuQuota?: boolean;
  /**
   * An empty directory of the host's, owned by its root (no id of any sandbox's): masked
   * directories get it bound read-only instead of a tmpfs of their own (one superblock fewer a
   * sandbox: see spawn_mask in native/spawn-child.c).
   */
  maskDir?: string;
}

/**
 * A tmpfs mounted inside another tmpfs of the config (`/dev/shm` in `/dev`): made a directory of
 * the outer one, bound onto itself with its own flags (`dir=`), not a superblock of its own; its
 * room is the outer tmpfs's. Null for any other mount.
 */
function nestedTmpfs(m: OciSubset['mounts'][number], before: OciSubset['mounts']): { mode: string; flags: number } | null {
  if (m.type !== 'tmpfs' || !before.some((o) => o.type === 'tmpfs' && m.destination.startsWith(o.destination.replace(/\/?$/, '/')))) return null;
  const { flags, data } = mountFlags(m.options);
  const mode = /(?:^|,)mode=([0-7]{1,4})(?:,|$)/.exec(data)?.[1] ?? '1777';
  return { mode, flags: flags & (MS.RDONLY | MS.NOSUID | MS.NODEV | MS.NOEXEC) };
}

/** The fields of a warren-hostd `spawn` request for an OCI config. */
export function spawnFields(config: OciSubset, paths: SpawnPaths): string[] {
  const { process: p, linux } = config;
  if (p.terminal) unsupported('a terminal');
  if (p.user.uid !== 0 || p.user.gid !== 0) unsupported('a process user other than root of the namespace');
  if (config.root.readonly) unsupported('a read-only root');
  if (linux.seccomp !== undefined) unsupported('a seccomp profile (warren-init installs its own filter)');
  if (linux.uidMappings.length !== 1 || linux.gidMappings.length !== 1) unsupported('other than one uid and one gid mapping');
  const caps = p.capabilities ?? {};
  const bounding = [...(caps.bounding ?? [])].sort().join();
  if ([caps.effective, caps.permitted].some((s) => [...(s ?? [])].sort().join() !== bounding) || (caps.inheritable ?? []).length || (caps.ambient ?? []).length)
    unsupported('capability sets that differ from the bounding set');
  if (/[=\t\n\0]/.test(linux.cgroupsPath) || !linux.cgroupsPath.startsWith('/')) unsupported('this cgroups path');

  // A network namespace the edge prepared is joined (by path); every other one is made new.
  const netns = linux.namespaces.find((n) => n.type === 'network' && n.path)?.path ?? null;
  if (netns !== null && /[\t\n\0]/.test(netns)) unsupported('this network namespace path');
  const ns = linux.namespaces.flatMap((n) => {
    if (n.path && n.type === 'network') return [];
    if (n.path) unsupported('joining an existing namespace other than a network one');
    return [NAMESPACES[n.type] ?? unsupported(`namespace ${n.type}`)];
  });
  const map = (m: { containerID: number; hostID: number; size: number }): string => `${m.containerID}:${m.hostID}:${m.size}`;
  // One path.join a controller (a create writes ~15 files in six of them: a join each was half of this function's time).
  const dirs = new Map<string, string>();
  const dirOf = (controller: string): string => {
    let d = dirs.get(controller);
    if (d === undefined) dirs.set(controller, (d = join(paths.cgroupRoot, controller, linux.cgroupsPath).replace(/\/+$/, '')));
    return d;
  };

  const f: string[] = [
    `root=${config.root.path}`,
    `sock=${paths.socket}`,
    `log=${paths.log}`,
    `ns=${ns.join(',')}`,
    `uidmap=${map(linux.uidMappings[0]!)}`,
    `gidmap=${map(linux.gidMappings[0]!)}`,
  ];
  if (paths.overlay) {
    const { upper, work, lowerBase } = paths.overlay;
    // Lower dirs below lowerBase are named relative to it (the spawner mounts from there): the
    // kernel takes one page of mount options, and 60 layers of absolute paths do not fit.
    const lower = lowerBase ? paths.overlay.lower.map((l) => (l.startsWith(lowerBase + '/') ? l.slice(lowerBase.length + 1) : l)) : paths.overlay.lower;
    if (lower.length === 0 || [...lower, upper, work, lowerBase ?? ''].some((d) => /[,:\x1f]/.test(d))) unsupported('overlay directories with , or :');
    f.push(`overlay=${[lower.join(':'), upper, work].join(US)}`);
    if (lowerBase) f.push(`overlaydir=${lowerBase}`);
    const lm = paths.layerMap;
    if (lm && lm.from !== lm.to) f.push(`layermap=${lm.from}:${lm.to}:${lm.size}`);
  }
  if (netns !== null) f.push(`netns=${netns}`);
  if (config.hostname) f.push(`hostname=${config.hostname}`);
  for (const c of SANDBOX_CONTROLLERS) f.push(`cg=${dirOf(c)}`);
  for (const [file, value] of cgroupWrites(linux.resources, dirOf))
    if (!(paths.withoutCpuQuota && file.endsWith('/cpu.cfs_quota_us'))) f.push(`cgw=${file}=${value}`);
  for (const [i, m] of config.mounts.entries()) {
    const nested = nestedTmpfs(m, config.mounts.slice(0, i));
    if (nested) {
      if (m.destination.includes(US)) unsupported(`mount ${m.destination}`);
      f.push(`dir=${[m.destination, nested.mode, String(nested.flags)].join(US)}`);
      continue;
    }
    const { flags: optionFlags, data } = mountFlags(m.options);
    const flags = m.type === 'bind' ? optionFlags | MS.BIND : optionFlags;
    const type = m.type === 'bind' ? 'none' : m.type;
    if ([m.destination, m.source, data].some((s) => s.includes(US))) unsupported(`mount ${m.destination}`);
    f.push(`mount=${[m.destination, type, m.source, String(flags), data].join(US)}`);
  }
  for (const d of DEFAULT_DEVICES) f.push(`dev=${d}`);
  for (const [target, path] of LINKS) f.push(`link=${target}${US}${path}`);
  if (paths.maskDir) f.push(`maskdir=${paths.maskDir}`);
  for (const m of linux.maskedPaths ?? []) f.push(`mask=${m}`);
  for (const r of linux.readonlyPaths ?? []) f.push(`ro=${r}`);
  for (const r of p.rlimits ?? []) {
    const n = RLIMITS[r.type] ?? unsupported(`rlimit ${r.type}`);
    f.push(`rlimit=${n}:${r.soft}:${r.hard}`);
  }
  f.push(`caps=${capabilityMask(caps.bounding ?? []).toString(16)}`);
  if (p.noNewPrivileges) f.push('nnp=1');
  f.push(`cwd=${p.cwd}`);
  for (const e of p.env) f.push(`env=${e}`);
  for (const a of p.args) f.push(`arg=${a}`);
  return f;
}
