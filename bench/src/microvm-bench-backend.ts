// A stand-alone microVM backend for the benchmarks that measure it without a node (fork, memory):
// one image's cached layer, the host's guest kernel, a data directory of its own.
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_ID_MAP } from '@warren/images';
import { MicrovmBackend, OWNER_PID_FILE, REPLY, chooseAccel, guestKit, startCommand, type BackendSandbox, type MicrovmBackendOptions } from '@warren/edge';

const NATIVE = new URL('../../native/build', import.meta.url).pathname;
const GUEST_CACHE = process.env.WARREN_GUEST_CACHE ?? '/var/cache/warren/guest';
const IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';

/** native/build's path of one of Warren's binaries. */
export const nativeBinary = (name: string): string => join(NATIVE, name);

/** A benchmark's own microVM backend: its layer's digest (the one layer the store knows), its accelerator, and a close that takes everything down. */
export interface BenchMicrovm {
  backend: MicrovmBackend;
  /** Its data directory (removed at close). */
  dir: string;
  digest: string;
  accel: 'kvm' | 'tcg';
  close: () => Promise<void>;
}

/**
 * A MicrovmBackend over `image`'s cached layer (`<image>.vN.erofs` in the image cache; bash
 * scripts/setup.sh makes it) in a fresh data directory marked as this process's (another run's
 * sweep of leftovers leaves it alone); `options` override the backend's (spares, pager, taps…).
 */
export async function openBenchMicrovm(
  image: 'busybox' | 'debian-python',
  prefix: string,
  options: Partial<MicrovmBackendOptions> = {},
): Promise<BenchMicrovm> {
  const meta = (await readdir(IMAGE_CACHE)).find((f) => new RegExp(`^${image}\\.v\\d+\\.erofs$`).test(f));
  if (!meta) throw new Error(`no ${image} layer in ${IMAGE_CACHE}: bash scripts/setup.sh makes it`);
  const data = join(IMAGE_CACHE, meta.replace(/\.erofs$/, '.data'));
  const digest = `sha256:${(image === 'busybox' ? 'b' : 'c').repeat(64)}`;
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await writeFile(join(dir, OWNER_PID_FILE), String(process.pid));
  const platform = join(dir, 'platform');
  await mkdir(platform);
  await copyFile(join(NATIVE, 'warren-init'), join(platform, 'warren-init'));
  const kit = (): ReturnType<typeof guestKit> => guestKit(GUEST_CACHE, join(NATIVE, 'warren-vmstage'), platform);
  const accel = await chooseAccel(GUEST_CACHE, kit).catch(() => 'tcg' as const);
  const backend = new MicrovmBackend({
    dir: join(dir, 'microvm'),
    store: {
      ensureMeta: async (d) => d === digest,
      layerPath: () => join(IMAGE_CACHE, meta),
      dataPath: () => (existsSync(data) ? data : null),
      addLayerTar: () => Promise.reject(new Error('no commits here')),
    },
    fsOps: { mknod: () => Promise.reject(new Error('unused')), setxattr: () => Promise.reject(new Error('unused')) },
    idMap: DEFAULT_ID_MAP,
    kit,
    accel,
    defaultDiskMiB: 1024,
    templateDir: join(dir, 'templates'),
    ...options,
  });
  return {
    backend,
    dir,
    digest,
    accel,
    close: async () => {
      // Its sandboxes too: a backend's own close leaves them running for a next start to adopt.
      for (const id of await backend.list().catch(() => [])) await backend.destroy(id).catch(() => undefined);
      await backend.releaseLayers((await backend.bases()).map((b) => `fork:${b}`)).catch(() => undefined);
      await backend.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Runs a shell command in a sandbox to its end: its stdout. */
export async function sh(sb: BackendSandbox, script: string): Promise<string> {
  const { call } = await startCommand(sb.connect, { argv: ['/bin/sh', '-c', script], env: [], stdin: false });
  let out = '';
  try {
    for (let f = await call.next(); f && f.type !== REPLY.done; f = await call.next()) if (f.type === REPLY.stdout) out += f.payload.toString();
    return out;
  } finally {
    call.close();
  }
}

/** What a QEMU's own memory is (MiB, resident anonymous + swapped, by mapping): see qemuParts. */
export interface QemuParts {
  /** The guest's pages written since its clone (its RAM file's mapping, copy-on-write). */
  guest: number;
  /** TCG's translated code (its one rwx mapping). */
  tcg: number;
  /** QEMU's heap (brk and malloc's mappings). */
  heap: number;
  /** Pages of QEMU's binary and libraries written at load (relocations). */
  libs: number;
  /** The rest: thread stacks, TLBs, hash tables. */
  other: number;
}

/** A QEMU's own pages by what they hold, from /proc/PID/smaps (resident anonymous plus swapped). */
export async function qemuParts(pid: number): Promise<QemuParts> {
  const parts: QemuParts = { guest: 0, tcg: 0, heap: 0, libs: 0, other: 0 };
  const kb = (k: string, text: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) / 1024;
  // One mapping: its header line, then its fields.
  for (const m of (await readFile(`/proc/${pid}/smaps`, 'utf8')).split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const head = m.slice(0, m.indexOf('\n'));
    const own = kb('Anonymous', m) + kb('Swap', m);
    const [, perms = '', , , inode = '0', path = ''] = head.split(/\s+/);
    if (path.endsWith('/ram')) parts.guest += own;
    else if (perms === 'rwxp' && inode === '0') parts.tcg += own;
    else if (path === '[heap]') parts.heap += own;
    else if (path.startsWith('/')) parts.libs += own;
    else parts.other += own;
  }
  return parts;
}

/** QemuParts as a line. */
export const partsLine = (p: QemuParts): string =>
  `the guest's pages ${p.guest.toFixed(1)}, TCG's code ${p.tcg.toFixed(1)}, QEMU's heap ${p.heap.toFixed(1)}, relocated library pages ${p.libs.toFixed(1)}, other ${p.other.toFixed(1)} MiB`;
