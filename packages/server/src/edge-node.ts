import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, rename } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  CgroupV1,
  ContainerBackend,
  Edge,
  MicrovmBackend,
  type MicrovmBackendOptions,
  chooseAccel,
  guestKit,
  type Backend,
  type GuestKit,
  type GuestKind,
  HostHelper,
  SandboxNetwork,
  openSandboxDisk,
  dataDiskRoom,
  defaultReserveBytes,
  readOwnCgroupParent,
  openNodeSwap,
  type SandboxDisk,
  type ZramSwap,
} from '@warren/edge';
import { parseNetworkRule } from '@warren/api';
import {
  DEFAULT_ID_MAP,
  HOST_BASH,
  HOST_BUSYBOX,
  LayerStore,
  RemoteBlobs,
  prepareDefaultImages,
  type PreparedImage,
  type DefaultImageName,
  type FsOps,
} from '@warren/images';
import type { Logger, WarrenOptions } from './node.js';

/** The options of a node's edge: all of WarrenOptions that is not the control plane's. */
export type EdgeNodeOptions = Omit<
  WarrenOptions,
  'port' | 'host' | 'database' | 'adminKey' | 'defaultTtlSeconds' | 'defaultBackend' | 'pullRegistries' | 'holdAt' | 'edgeTransport'
>;

/** A node's edge and what it stands on, opened (see openEdgeNode). */
export interface EdgeNode {
  edge: Edge;
  layers: LayerStore;
  /** warren-hostd: mounts, spawns, file operations as root. */
  mounts: HostHelper;
  remote: RemoteBlobs | null;
  disk: SandboxDisk | null;
  /** Sandbox networking (null: loopback only). */
  network: SandboxNetwork | null;
  /** The default images' layers, built or found in the image cache (and put in `layers`). */
  prepared: Map<DefaultImageName, PreparedImage>;
  /** Space kept on the data dir's disk for Warren's own state (bytes). */
  diskReserve: number;
  /** A sandbox's writable layer when it asks for no limit (MiB); null: no disk quotas here. */
  defaultDiskMiB: number | null;
  /** Kills the process at a named step (fault-injection tests). */
  failpoint?: (step: string) => void;
  /** Opens the node's swap: last, when nothing after can fail (the swap is the host's). */
  openSwap(): Promise<ZramSwap | null>;
  /** Stops the edge and lets go of what it stands on; `keep` leaves its sandboxes running. */
  close(o: { keep: boolean; swap: ZramSwap | null }): Promise<void>;
}

export const defaultNativeDir = (): string => fileURLToPath(new URL('../../../native/build/', import.meta.url));

/**
 * Puts a helper into the platform dir. Running sandboxes execute the old file, so it is never
 * written in place (ETXTBSY): an unchanged file is left alone, a changed one renamed over.
 */
async function installPlatformFile(src: string, dest: string): Promise<void> {
  const [a, b] = await Promise.all([readFile(src), readFile(dest).catch(() => null)]);
  if (b && a.equals(b)) return;
  const tmp = `${dest}.${process.pid}.tmp`;
  await copyFile(src, tmp);
  await chmod(tmp, 0o755);
  await rename(tmp, dest);
}

async function openNetwork(
  host: HostHelper,
  dataDir: string,
  o: Exclude<WarrenOptions['network'], false | undefined>,
  logger: Logger,
): Promise<SandboxNetwork> {
  let block;
  if (o.subnet) {
    const r = parseNetworkRule(o.subnet);
    if (r.kind !== 'cidr' || r.prefix !== 18) throw new Error(`network subnet "${o.subnet}" must be an IPv4 /18`);
    block = { base: r.base, prefix: r.prefix };
  }
  const deny = (o.deny ?? []).map((c) => {
    const r = parseNetworkRule(c);
    if (r.kind !== 'cidr') throw new Error(`--deny-networks takes IPv4 CIDRs (10.0.0.0/24), not "${c}"`);
    return { base: r.base, prefix: r.prefix };
  });
  const net = new SandboxNetwork({
    host,
    dataDir,
    runDir: join(dataDir, 'run'),
    block,
    hosts: o.hosts,
    poolSize: o.poolSize,
    maxConnectionsPerSandbox: o.maxConnectionsPerSandbox,
    newConnectionsPerSecond: o.newConnectionsPerSecond,
    dnsQueriesPerSecond: o.dnsQueriesPerSecond,
    deny,
    logger,
  });
  await net.open();
  return net;
}

/** A reader of layers the node lacks from a blob store (see WarrenOptions.blobStore). */
export function remoteBlobs(o: { dataDir: string; nativeDir: string; logger: Logger }, b: NonNullable<WarrenOptions['blobStore']>): RemoteBlobs {
  return new RemoteBlobs({
    url: b.url,
    key: b.key,
    credentials: b.username !== undefined ? { username: b.username, password: b.password ?? '' } : undefined,
    binary: join(o.nativeDir, 'warren-blobfs'),
    sourcesDir: join(o.dataDir, 'layers', 'blobs'),
    mountDir: join(o.dataDir, 'mnt', 'remote'),
    cacheDir: join(o.dataDir, 'cache', 'blobs'),
    cacheMaxBytes: b.cacheMaxBytes ?? 20 * 2 ** 30,
    runDir: join(o.dataDir, 'cache'),
    log: (m) => o.logger.info(m),
  });
}

/**
 * Opens a node's edge: the platform mount, the layer store (and a blob store to read missing
 * layers from), the default images' layers, warren-hostd, the sandboxes' disk, the container
 * backend, sandbox networking and the Edge itself. Not started: the caller takes back earlier
 * sandboxes first, then calls `edge.start()`.
 */
export async function openEdgeNode(o: EdgeNodeOptions): Promise<EdgeNode> {
  const nativeDir = o.nativeDir ?? defaultNativeDir();
  const nodeId = o.nodeId ?? 'node-1';
  await mkdir(o.dataDir, { recursive: true });
  // Sandbox roots and the platform mount live below the data dir: root inside a sandbox (an
  // unprivileged host uid) must be able to traverse it, but not list it.
  await chmod(o.dataDir, 0o711);
  const platformDir = join(o.dataDir, 'platform');
  await mkdir(platformDir, { recursive: true, mode: 0o755 });
  await installPlatformFile(join(nativeDir, 'warren-init'), join(platformDir, 'warren-init'));
  await installPlatformFile(HOST_BUSYBOX, join(platformDir, 'busybox'));
  await installPlatformFile(HOST_BASH, join(platformDir, 'bash'));
  await installPlatformFile(join(nativeDir, 'libwarren-fn.so'), join(platformDir, 'libwarren-fn.so'));
  await installPlatformFile(join(nativeDir, 'fn-zygote.py'), join(platformDir, 'fn-zygote.py'));

  const layers = new LayerStore(join(o.dataDir, 'layers'));
  await layers.open();
  const remote = o.blobStore ? remoteBlobs({ dataDir: o.dataDir, nativeDir, logger: o.logger }, o.blobStore) : null;
  if (remote) {
    await remote.start();
    layers.remote = remote;
  }
  const prepared = await prepareDefaultImages({ cacheDir: o.imageCacheDir, only: o.images, log: (m) => o.logger.info(m) });
  for (const { file, data, digest, blocks } of prepared.values())
    if (!(await layers.hasLayer(digest))) await layers.addLayerFile(file, data, { digest, blocks });

  const mounts = new HostHelper(join(nativeDir, 'warren-hostd'), (why) =>
    o.logger.warn('warren-hostd died; a new one took its place (calls it had not answered failed)', { error: String(why) }),
  );
  const diskReserve = o.dataDiskReserveMiB !== undefined ? o.dataDiskReserveMiB * 2 ** 20 : defaultReserveBytes((await dataDiskRoom(o.dataDir)).sizeBytes);
  if (o.unhardened) o.logger.warn('UNHARDENED node (benchmark baseline): sandboxes run without seccomp, masked paths, disk quotas or id ranges of their own');
  const disk =
    o.disk === false || o.unhardened
      ? null
      : await openSandboxDisk(o.dataDir, { sizeGiB: o.disk?.sizeGiB, reserveBytes: diskReserve, log: (m, meta) => o.logger.info(m, meta) });
  if (disk?.quotas && o.disk && o.disk.defaultMiB !== undefined && o.disk.defaultMiB > disk.sizeMiB / 2)
    throw new Error(`the default sandbox disk (${o.disk.defaultMiB} MiB) is more than half of the sandboxes’ file system (${disk.sizeMiB} MiB)`);
  const backend = new ContainerBackend({
    dataDir: o.dataDir,
    platformDir,
    runcPath: o.runcPath ?? 'runc',
    runcRoot: o.runcRoot ?? '/run/runc',
    cgroupParent: readOwnCgroupParent(),
    idMap: DEFAULT_ID_MAP,
    store: layers,
    mounts,
    spawner: mounts,
    cgroups: new CgroupV1(),
    runtime: o.runtime,
    pageoutPath: join(nativeDir, 'warren-pageout'),
    diskQuotas: disk?.quotas ?? false,
    unhardened: o.unhardened,
    logger: o.logger,
  });
  await backend.open();
  const backends: Backend[] = [backend];
  const network = o.network === false ? null : await openNetwork(mounts, o.dataDir, o.network ?? {}, o.logger);
  const guestHost: GuestHost = { layers, fsOps: mounts, nativeDir, platformDir, network };
  const microvm = await openMicrovm(o, guestHost);
  if (microvm) backends.push(microvm);
  const vm = microvm && o.vm !== false ? await openVm(o, microvm.accelerator, guestHost) : null;
  if (vm) backends.push(vm);
  const ncpu = o.overcommit?.cpus ?? cpus().length;
  const memMiB = o.overcommit?.memoryMiB ?? Math.floor(totalmem() / 1024 / 1024);
  const crashAt = o.crashAt;
  const failpoint = crashAt
    ? (step: string): void => {
        if (step === crashAt) process.kill(process.pid, 'SIGKILL');
      }
    : undefined;
  const edge = new Edge({
    nodeId,
    backends,
    now: o.clock,
    capacity: {
      cpu: ncpu * (o.overcommit?.cpu ?? 64),
      busyCpu: o.overcommit?.busy === 0 ? undefined : ncpu * (o.overcommit?.busy ?? 0.9),
      memoryMiB: Math.floor(memMiB * (o.overcommit?.memory ?? 1.5)),
      sandboxes: o.maxSandboxes ?? 4096,
      maxCpuPerSandbox: ncpu,
      maxMemoryMiBPerSandbox: memMiB,
      // Half the sandboxes' file system: one sandbox filling its quota leaves room for the rest.
      maxDiskMiBPerSandbox: disk?.quotas ? Math.floor(disk.sizeMiB / 2) : undefined,
    },
    memoryFloorMiB: o.memoryFloorMiB,
    maxRetainedOutputBytes: o.maxRetainedOutputBytes,
    // The node's FnCall workers (the pools, image and call sizes are the control plane's).
    fn: o.fn && { maxWorkersPerImage: o.fn.maxWorkersPerImage, queueLimit: o.fn.queueLimit, idleMs: o.fn.idleMs },
    failpoint,
    logger: o.logger,
    network: network ?? undefined,
  });
  // 10 GiB unless set, and never more than a quarter of the sandboxes' file system.
  const defaultDiskMiB = disk?.quotas ? ((o.disk ? o.disk.defaultMiB : undefined) ?? Math.min(10240, Math.floor(disk.sizeMiB / 4))) : null;
  return {
    edge,
    layers,
    mounts,
    remote,
    disk,
    network,
    prepared,
    diskReserve,
    defaultDiskMiB,
    failpoint,
    openSwap: async () =>
      o.swap === false
        ? null
        : openNodeSwap({ stateFile: join(o.dataDir, 'zram.device'), sizeMiB: o.swap?.zramMiB, totalMemMiB: Math.floor(totalmem() / 2 ** 20), log: o.logger }),
    close: async ({ keep, swap }) => {
      const held = (await edge.states()).length;
      await edge.close({ keep });
      // Kept sandboxes read their layers through it: it stays for the next start.
      if (remote && (!keep || held === 0)) await remote.stop();
      await mounts.close();
      await disk?.close({ keep: keep && held > 0 });
      await swap?.close();
    },
  };
}

/** What a VM backend takes from its node: the layer store, host file operations, the native and platform files, the sandbox network. */
interface GuestHost {
  layers: LayerStore;
  fsOps: FsOps;
  nativeDir: string;
  platformDir: string;
  network: SandboxNetwork | null;
}

/** Where `scripts/guest-kernel.sh` unpacks the microVM guest kernel by default. */
export const DEFAULT_GUEST_CACHE = process.env.WARREN_GUEST_CACHE ?? '/var/cache/warren/guest';

/**
 * The microVM backend, when this node can run it: QEMU installed and a guest kernel in the cache
 * (else null, said in the log). Its guests run under KVM when /dev/kvm is there and really runs
 * one (probed once per host boot: on some machines /dev/kvm opens and yet hangs a stock
 * kernel), else under TCG, unless told which.
 */
async function openMicrovm(o: EdgeNodeOptions, h: GuestHost): Promise<MicrovmBackend | null> {
  const { nativeDir, platformDir } = h;
  if (o.microvm === false) return null;
  const cacheDir = o.microvm?.guestCacheDir ?? DEFAULT_GUEST_CACHE;
  const qemu = ['/usr/bin/qemu-system-x86_64', '/usr/local/bin/qemu-system-x86_64'].some((p) => existsSync(p));
  if (!qemu || !existsSync(join(cacheDir, 'current'))) {
    o.logger.info('no microVM backend on this node (QEMU or the guest kernel is missing: bash scripts/setup.sh installs both)', { cacheDir });
    return null;
  }
  const kitOnce = kitOf(cacheDir, nativeDir, platformDir, 'microvm');
  const accel = o.microvm?.accel ?? (await chooseAccel(cacheDir, kitOnce).catch(() => 'tcg' as const));
  return new MicrovmBackend({
    dir: join(o.dataDir, 'microvm'),
    kit: kitOnce,
    accel,
    defaultDiskMiB: 1024,
    templateDir: o.microvm?.snapshots === false ? null : join(o.dataDir, 'microvm-templates'),
    spares: o.microvm ? o.microvm.spares : undefined,
    ...guestShared(h),
  });
}

/** What both VM backends take alike from their node: its layers (and their ids), host file operations, its sandbox network's taps. */
function guestShared(h: GuestHost): Pick<MicrovmBackendOptions, 'store' | 'idShift' | 'idMap' | 'fsOps' | 'bindTap'> {
  const network = h.network;
  return {
    store: h.layers,
    idShift: { base: DEFAULT_ID_MAP.hostStart, size: DEFAULT_ID_MAP.size },
    idMap: DEFAULT_ID_MAP,
    fsOps: h.fsOps,
    bindTap: network ? (tap, link) => network.bindTap(tap, link) : undefined,
  };
}

/** A guest kit of `kind`, built on first use (one that failed is tried again next time). */
function kitOf(cacheDir: string, nativeDir: string, platformDir: string, kind: GuestKind): () => Promise<GuestKit> {
  let kit: Promise<GuestKit> | null = null;
  return () =>
    (kit ??= guestKit(cacheDir, join(nativeDir, 'warren-vmstage'), platformDir, kind).catch((e: unknown) => {
      kit = null;
      throw e;
    }));
}

/**
 * The full-VM backend, when this node can run it: the microVM backend's QEMU and accelerator,
 * and the full VMs' guest kernel in the same cache (else null, said in the log).
 */
async function openVm(o: EdgeNodeOptions, accel: string, h: GuestHost): Promise<MicrovmBackend | null> {
  const { nativeDir, platformDir } = h;
  const cacheDir = (o.microvm || undefined)?.guestCacheDir ?? DEFAULT_GUEST_CACHE;
  if (!existsSync(join(cacheDir, 'current-vm'))) {
    o.logger.info('no full-VM backend on this node (its guest kernel is missing: bash scripts/setup.sh fetches it)', { cacheDir });
    return null;
  }
  const v = o.vm || undefined;
  return new MicrovmBackend({
    kind: 'vm',
    dir: join(o.dataDir, 'vm'),
    kit: kitOf(cacheDir, nativeDir, platformDir, 'vm'),
    accel: accel === 'kvm' ? 'kvm' : 'tcg',
    defaultDiskMiB: 2048,
    bootTimeoutMs: v?.bootTimeoutMs ?? 600_000,
    templateDir: v?.snapshots === false ? null : join(o.dataDir, 'vm-templates'),
    spares: v?.spares,
    ...guestShared(h),
  });
}
