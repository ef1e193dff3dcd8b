import type { FnRunRequest } from '@warren/api';
import type { DefaultImageName } from '@warren/images';
import type { ContainerRuntime } from '../backends/container/container-backend.js';
import type { Logger } from '../util/logger.js';

/**
 * The options of a node's edge (`warren edge`, and the edge `warren up` opens): its data dir,
 * backends, networking, disk, swap, what it promises and its FnCall workers. The control plane's
 * WarrenOptions extend them.
 */
export interface EdgeNodeOptions {
  dataDir: string;
  /** Where default images are built once and kept across data dirs. */
  imageCacheDir: string;
  nodeId?: string;
  nativeDir?: string;
  runcPath?: string;
  runcRoot?: string;
  /**
   * The microVM backend (QEMU `microvm`): on when QEMU and the guest kernel
   * (scripts/guest-kernel.sh, under `guestCacheDir`) are there, unless false. `snapshots:
   * false` boots every microVM's guest rather than cloning a template (a benchmark's cold boot);
   * `spares`: QEMUs kept started for the next clones (default 1; 0: none). `ksm: true` turns
   * the kernel's samepage merging on while the node runs (what guests hold alike, their page caches
   * of the same image files above all, is kept once; see MicrovmBackendOptions.ksm); absent or
   * false: KSM is left as it is, since merging across tenants is a timing channel between them.
   * Each microVM's image layers are mapped into its guest (MicrovmBackendOptions.daxLayers)
   * unless `dax: false` (virtio disks).
   */
  microvm?: false | { accel?: 'kvm' | 'tcg'; guestCacheDir?: string; snapshots?: boolean; spares?: number; ksm?: boolean; dax?: boolean };
  /**
   * The full-VM backend (QEMU `q35` with a display; `"backend": "vm"`): on when QEMU and the
   * full VMs' guest kernel are there and the microVM backend is not turned off, unless false.
   * Its accelerator and guest cache are the microVM backend's; `snapshots` and `spares` as there;
   * `bootTimeoutMs`: how long a VM's first boot (its template's) may take (default 10 minutes).
   */
  vm?: false | { snapshots?: boolean; spares?: number; bootTimeoutMs?: number };
  /** How sandbox inits start: `native` (default) or `runc`. */
  runtime?: ContainerRuntime;
  images?: DefaultImageName[];
  /** Sandboxes the node holds at most (default: defaultMaxSandboxes of the host's kernel.pid_max). */
  maxSandboxes?: number;
  /**
   * A blob store to read layer data from on demand: `http(s)://…` serving `<url>/<hex>.erofs|.data`
   * with range requests (never listed), or a registry repository `oci://host/repo` (`oci+http://`
   * for plain HTTP): layers this node lacks are mounted without downloading them.
   */
  blobStore?: { url: string; key?: string; username?: string; password?: string; cacheMaxBytes?: number };
  /**
   * Sandbox networking (default on): `false` gives every sandbox loopback only. `hosts` maps
   * names to addresses for the egress proxy (before DNS; the operator's word, so internal
   * addresses are allowed there); `subnet` is the sandboxes' block, a /16 to /18 (default: a free
   * /17 in 10.200.0.0/13); `poolSize` network namespaces are kept ready; `deny` lists IPv4 CIDRs no
   * sandbox reaches whatever its rules (the cluster's own hosts: those a join answers are added).
   * `endpoints` names targets (`policy: 'http://10.0.0.5:8000'`) a sandbox whose rules ask for
   * them reaches at `http://NAME.warren.internal/`, each request with the header
   * `X-Warren-Sandbox-Token`: hex HMAC-SHA256 of the sandbox's id under `endpointSecret`
   * (default: a random one kept in the data dir), at most `endpointRequestsPerSecond` requests a
   * second per sandbox and endpoint (default 50, a burst of twice that).
   */
  network?:
    | false
    | {
        endpoints?: Record<string, string>;
        endpointSecret?: string;
        endpointRequestsPerSecond?: number;
        hosts?: Record<string, string>;
        deny?: string[];
        subnet?: string;
        poolSize?: number;
        maxConnectionsPerSandbox?: number;
        newConnectionsPerSecond?: number;
        dnsQueriesPerSecond?: number;
      };
  /**
   * What the node promises. Memory requests (resources.memoryRequestMiB, by default a quarter of
   * the limit) are admitted up to its memory plus what its zram holds beyond its own footprint at
   * an assumed 2 : 1 (committableMemoryMiB; `memory`: its memory × that instead), and each create
   * also needs its request really available above the floor (memoryFloorMiB) once idle
   * sandboxes are paged out and paused; a paused sandbox counts only what stays resident. CPU limits are caps, not
   * reservations: a create is refused when the node's sandboxes have used more than its CPUs ×
   * `busy` over the last ~10 s (default 0.9; 0: no such check), and CPU limits of running
   * sandboxes may add up to its CPUs × `cpu` (default 128, a safety bound). `cpus`/`memoryMiB`
   * replace what the machine has (for tests and shared hosts).
   */
  overcommit?: { cpu?: number; busy?: number; memory?: number; cpus?: number; memoryMiB?: number };
  /**
   * Available memory the node keeps by paging out, then pausing, its longest-idle sandboxes
   * (MiB; default 5 % of its memory, at least 512 MiB; 0: off, and no check of real memory at
   * create).
   */
  memoryFloorMiB?: number;
  /**
   * A memory limit on all the node's sandboxes together (MiB): they go under a parent cgroup of
   * this data dir's with that limit, which is then the node's memory for admission, the floor's
   * default and memory pressure (a shared host; a test that starves a node, not the machine).
   */
  sandboxMemoryMiB?: number;
  /**
   * Compressed swap in RAM (zram) for paused sandboxes' memory, set up at start, removed at stop.
   * Default: half of the machine's memory, unless the host has swap already; `false`: none.
   */
  swap?: false | { zramMiB?: number };
  /**
   * Sandboxes' writable layers on a btrfs file system of their own with per-sandbox quotas
   * (default on): `sizeGiB` for its sparse image (default 80 % of the data dir's free space),
   * `defaultMiB` for a sandbox that asks for no limit (default 10 GiB). `false`: plain
   * directories, and a create asking for diskMiB is refused.
   */
  disk?: false | { sizeGiB?: number; defaultMiB?: number };
  /**
   * Space on the data dir's disk kept for Warren's own state (the store, layers): the sandboxes'
   * image is sized to leave it, and imports, uploads, pulls and commits that would reach into it
   * answer resource_exhausted. Default: 5 % of the disk, 256 MiB to 2 GiB.
   */
  dataDiskReserveMiB?: number;
  /**
   * For the hardening benchmark's baseline only (bench/src/hardening.ts): sandboxes without
   * seccomp, masked paths, disk quotas or id ranges of their own. Never for a node anyone uses.
   */
  unhardened?: boolean;
  /** The node's FnCall workers (the control plane's FnOptions add images, sizes and quotas). */
  fn?: NodeFnOptions;
  /** Command output the node holds for all sandboxes together (default an eighth of memory, at most 4 GiB). */
  maxRetainedOutputBytes?: number;
  /**
   * For fault-injection tests only: the process kills itself (SIGKILL) when it reaches this
   * step (`exec:stored`, `exec:started`, `delete:stored`, `network:stored`).
   */
  crashAt?: string;
  logger: Logger;
  /**
   * The lifecycle's clock (default Date.now): what TTLs, idle timeouts and pause-after-idle are
   * measured by. Tests pass their own and advance it, then run the sweep.
   */
  clock?: () => number;
}

/** What of FnCall is the node's: its warm pools (said in its join), worker and queue limits. */
export interface NodeFnOptions {
  /** Workers kept warm on every node, per image (default resources); python also starts its zygote. */
  pools?: Array<{ image: string; language?: FnRunRequest['language']; size: number }>;
  /** The most workers of one image on a node (default twice its CPUs, at least 4). */
  maxWorkersPerImage?: number;
  /** Calls one tenant may have waiting on a node, all images together (default 10 000). */
  queueLimit?: number;
  /** Workers beyond a pool's size are removed after this long without a call (default 30 s). */
  idleMs?: number;
}
