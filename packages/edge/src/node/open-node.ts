import { cpus, totalmem } from 'node:os';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DEFAULT_ID_MAP, LayerStore, prepareDefaultImages, type RemoteBlobs, type PreparedImage, type DefaultImageName } from '@warren/images';
import type { Backend } from '../backends/backend.js';
import { ContainerBackend } from '../backends/container/container-backend.js';
import { CgroupV1, readOwnCgroupParent } from '../host/cgroups.js';
import { makeProcessBatch } from '../host/cpu-class.js';
import { dataDiskRoom, defaultReserveBytes } from '../host/data-disk.js';
import { HostHelper } from '../host/hostd.js';
import { openSandboxDisk, type SandboxDisk } from '../host/sandbox-disk.js';
import { openNodeSwap, parseSwaps, plannedZramMiB, type ZramSwap } from '../host/swap.js';
import { limitedParentName, openSandboxMemory } from '../host/sandbox-memory.js';
import { committableMemoryMiB } from '../lifecycle/admission.js';
import { defaultMemoryFloorMiB } from '../lifecycle/housekeeping.js';
import { Edge } from '../lifecycle/edge.js';
import type { SandboxNetwork } from '../net/sandbox-network.js';
import { hostAddresses } from './host-addresses.js';
import { openMicrovm, openVm, type GuestHost } from './guest-backends.js';
import { linkEdge, type EdgeTransport, type LinkedEdge } from './link-edge.js';
import { openNetwork } from './node-network.js';
import type { EdgeNodeOptions } from './node-options.js';
import { defaultNativeDir, installPlatform } from './platform-files.js';
import { remoteBlobs } from './remote-blobs.js';
import { defaultMaxSandboxes, pidMax } from './sandbox-cap.js';

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
  /** The EdgeApi a control plane in this process calls: the edge itself, or over the edge protocol on a Unix socket. */
  link(transport?: EdgeTransport): Promise<LinkedEdge>;
  /**
   * Starts the edge once what ran before is taken back (or failed): its network's leftovers
   * swept, the cluster's `hosts` (names or addresses) kept out of its sandboxes' reach, the sweep
   * started.
   */
  start(hosts?: readonly string[]): Promise<void>;
  /** Keeps the cluster's hosts (names or addresses, resolved here) out of its sandboxes' reach. */
  keepFromSandboxes(hosts: readonly string[]): Promise<void>;
  /** Opens the node's swap: last, when nothing after can fail (the swap is the host's). */
  openSwap(): Promise<ZramSwap | null>;
  /** Stops the edge and lets go of what it stands on; `keep` leaves its sandboxes running. Answers the ids of the sandboxes it held. */
  close(o: { keep: boolean; swap: ZramSwap | null }): Promise<string[]>;
}

/**
 * Opens a node's edge: the platform mount, the layer store (and a blob store to read missing
 * layers from), the default images' layers, warren-hostd, the sandboxes' disk, the container
 * backend, sandbox networking and the Edge itself. Not started: the caller takes back earlier
 * sandboxes first, then calls `start()`.
 * @example
 * const node = await openEdgeNode({ dataDir: '/var/lib/warren', imageCacheDir: '/var/cache/warren/images', logger: console });
 */
export async function openEdgeNode(o: EdgeNodeOptions): Promise<EdgeNode> {
  const nativeDir = o.nativeDir ?? defaultNativeDir();
  const nodeId = o.nodeId ?? 'node-1';
  const platformDir = await installPlatform(o.dataDir, nativeDir);

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
  const cgroups = new CgroupV1();
  // Sandboxes that share a memory limit have a parent cgroup of their own, this data dir's.
  const cgroupParent = readOwnCgroupParent(o.sandboxMemoryMiB === undefined ? undefined : limitedParentName(o.dataDir));
  const limited = o.sandboxMemoryMiB === undefined ? null : await openSandboxMemory(cgroups.mountRoot, cgroupParent, o.sandboxMemoryMiB);
  const backend = new ContainerBackend({
    dataDir: o.dataDir,
    platformDir,
    runcPath: o.runcPath ?? 'runc',
    runcRoot: o.runcRoot ?? '/run/runc',
    cgroupParent,
    idMap: DEFAULT_ID_MAP,
    store: layers,
    mounts,
    spawner: mounts,
    exits: mounts,
    cgroups,
    runtime: o.runtime,
    pageoutPath: join(nativeDir, 'warren-pageout'),
    diskQuotas: disk?.quotas ?? false,
    unhardened: o.unhardened,
    logger: o.logger,
  });
  await backend.open();
  const backends: Backend[] = [backend];
  const network = o.network === false ? null : await openNetwork(mounts, o.dataDir, o.network ?? {}, o.logger);
  // Batch microVMs' and VMs' QEMUs share one cpu cgroup beside the sandboxes' (not under it: the sweep of leftovers owns that).
  const vmBatchCgroup = readOwnCgroupParent('warren-vm-batch');
  const guestHost: GuestHost = {
    layers,
    fsOps: mounts,
    nativeDir,
    platformDir,
    network,
    batchProcess: (pid) => makeProcessBatch(new CgroupV1(), vmBatchCgroup, pid),
  };
  const microvm = await openMicrovm(o, guestHost);
  if (microvm) backends.push(microvm);
  const vm = microvm && o.vm !== false ? await openVm(o, microvm.accelerator, guestHost) : null;
  if (vm) backends.push(vm);
  const ncpu = o.overcommit?.cpus ?? cpus().length;
  const totalMiB = Math.floor(totalmem() / 2 ** 20);
  const memMiB = o.overcommit?.memoryMiB ?? o.sandboxMemoryMiB ?? totalMiB;
  // Compressed swap holds more than it takes: requests may add up to the memory plus that (never more than twice the memory).
  const zramMiB = Math.min(memMiB, plannedZramMiB(parseSwaps(await readFile('/proc/swaps', 'utf8').catch(() => '')), o.swap, totalMiB));
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
      cpu: ncpu * (o.overcommit?.cpu ?? 128),
      busyCpu: o.overcommit?.busy === 0 ? undefined : ncpu * (o.overcommit?.busy ?? 0.9),
      memoryMiB: committableMemoryMiB({ memoryMiB: memMiB, zramMiB, overcommit: o.overcommit?.memory }),
      sandboxes: o.maxSandboxes ?? defaultMaxSandboxes(await pidMax()),
      maxCpuPerSandbox: ncpu,
      maxMemoryMiBPerSandbox: memMiB,
      // Half the sandboxes' file system: one sandbox filling its quota leaves room for the rest.
      maxDiskMiBPerSandbox: disk?.quotas ? Math.floor(disk.sizeMiB / 2) : undefined,
    },
    memoryFloorMiB: o.memoryFloorMiB ?? (limited ? defaultMemoryFloorMiB(limited.limitMiB * 2 ** 20) : undefined),
    memoryAvailableMiB: limited ? () => limited.availableMiB() : undefined,
    maxRetainedOutputBytes: o.maxRetainedOutputBytes,
    // The node's FnCall workers (the pools, image and call sizes are the control plane's).
    fn: o.fn && { maxWorkersPerImage: o.fn.maxWorkersPerImage, queueLimit: o.fn.queueLimit, idleMs: o.fn.idleMs },
    failpoint,
    logger: o.logger,
    network: network ?? undefined,
  });
  // 10 GiB unless set, and never more than a quarter of the sandboxes' file system.
  const defaultDiskMiB = disk?.quotas ? ((o.disk ? o.disk.defaultMiB : undefined) ?? Math.min(10240, Math.floor(disk.sizeMiB / 4))) : null;
  const keepFromSandboxes = async (hosts: readonly string[]): Promise<void> => {
    const named = hosts.filter(Boolean);
    if (network && named.length) await network.setClusterHosts(await hostAddresses(named));
  };
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
    link: (transport) => linkEdge(edge, { transport, dataDir: o.dataDir, logger: o.logger, clock: o.clock, layers }),
    keepFromSandboxes,
    start: async (hosts = []) => {
      await network?.sweep();
      await keepFromSandboxes(hosts);
      edge.start();
    },
    openSwap: async () =>
      o.swap === false
        ? null
        : openNodeSwap({ stateFile: join(o.dataDir, 'zram.device'), sizeMiB: o.swap?.zramMiB, totalMemMiB: Math.floor(totalmem() / 2 ** 20), log: o.logger }),
    close: async ({ keep, swap }) => {
      const held = (await edge.states()).map((x) => x.id);
      await edge.close({ keep });
      // Kept sandboxes read their layers through it: it stays for the next start.
      if (remote && (!keep || held.length === 0)) await remote.stop();
      await mounts.close();
      await disk?.close({ keep: keep && held.length > 0 });
      if (!keep || held.length === 0) await limited?.close();
      await swap?.close();
      return held;
    },
  };
}
