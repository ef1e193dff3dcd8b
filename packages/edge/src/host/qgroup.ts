import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readFile, realpath } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A subvolume is full when less than this is left under its qgroup's limit (what a refused write leaves: tens of KiB). */
export const DISK_FULL_MARGIN_BYTES = 2 ** 20;

/** A qgroup's files in sysfs (/sys/fs/btrfs/UUID/qgroups/0_ID), bytes. */
export interface QgroupFiles {
  referenced: number;
  maxReferenced: number;
  /** Space reserved for writes not yet committed (rsv_data, rsv_meta_pertrans, rsv_meta_prealloc). */
  reserved: number;
}

/** The bytes left under a qgroup's limit (null: it has none). */
export function qgroupFreeBytes(q: QgroupFiles): number | null {
  return q.maxReferenced > 0 ? Math.max(0, q.maxReferenced - q.referenced - q.reserved) : null;
}

/** The source device of the file system mounted at `dir` (the top one there) in a /proc/self/mountinfo, or null. */
export function mountSource(mountinfo: string, dir: string): string | null {
  let source: string | null = null;
  for (const line of mountinfo.split('\n')) {
    const f = line.split(' ');
    const sep = f.indexOf('-');
    if (f[4] === dir && sep > 0) source = f[sep + 2] ?? null;
  }
  return source;
}

/**
 * How full the sandboxes' subvolumes are, read from the kernel's qgroup counters in sysfs (a few
 * small files: cheap enough for a command that failed, unlike `btrfs qgroup show`). The file
 * system's sysfs directory is found once, each subvolume's id once (`btrfs inspect-internal
 * rootid`, a few ms) and kept until it is forgotten.
 */
export class SubvolumeQuotas {
  private fsDir: Promise<string | null> | null = null;
  private readonly ids = new Map<string, Promise<number | null>>();

  constructor(
    /** The btrfs mount the subvolumes are in (host/sandbox-disk.ts). */
    private readonly dir: string,
    private readonly sysfs = '/sys/fs/btrfs',
  ) {}

  /** Whether subvolume `name` has less than DISK_FULL_MARGIN_BYTES left under its limit (null: no limit, or not known). */
  async full(name: string): Promise<boolean | null> {
    const free = await this.freeBytes(name);
    return free === null ? null : free < DISK_FULL_MARGIN_BYTES;
  }

  /** The bytes left under subvolume `name`'s limit (null: no limit, or not known). */
  async freeBytes(name: string): Promise<number | null> {
    const [fs, id] = await Promise.all([(this.fsDir ??= this.findFs()), this.subvolumeId(name)]);
    if (fs === null || id === null) return null;
    const q = join(fs, 'qgroups', `0_${id}`);
    const read = async (f: string): Promise<number> => Number((await readFile(join(q, f), 'utf8')).trim());
    try {
      const [referenced, maxReferenced, ...rsv] = await Promise.all(
        ['referenced', 'max_referenced', 'rsv_data', 'rsv_meta_pertrans', 'rsv_meta_prealloc'].map((f) => read(f).catch(() => 0)),
      );
      return qgroupFreeBytes({ referenced: referenced ?? 0, maxReferenced: maxReferenced ?? 0, reserved: rsv.reduce((a, b) => a + b, 0) });
    } catch {
      return null;
    }
  }

  /** Forgets a subvolume's id (it was removed). */
  forget(name: string): void {
    this.ids.delete(name);
  }

  private subvolumeId(name: string): Promise<number | null> {
    let id = this.ids.get(name);
    if (!id) {
      id = run('btrfs', ['inspect-internal', 'rootid', join(this.dir, name)]).then(
        (r) => Number(r.stdout.trim()) || null,
        () => null,
      );
      // Not known now (not a subvolume yet, or gone): asked again next time.
      void id.then((x) => x === null && this.ids.delete(name));
      this.ids.set(name, id);
    }
    return id;
  }

  /** /sys/fs/btrfs/UUID of the file system at `dir`: the one whose devices hold the mount's source. */
  private async findFs(): Promise<string | null> {
    const source = mountSource(await readFile('/proc/self/mountinfo', 'utf8').catch(() => ''), this.dir);
    if (!source?.startsWith('/')) return null;
    const dev = basename(await realpath(source).catch(() => source));
    for (const uuid of await readdir(this.sysfs).catch(() => [] as string[])) {
      if (existsSync(join(this.sysfs, uuid, 'devices', dev))) return join(this.sysfs, uuid);
    }
    return null;
  }
}
