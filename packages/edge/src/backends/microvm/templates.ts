import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** What makes two microVMs' templates the same: everything their guests were booted with. */
export interface TemplateKey {
  kernel: string;
  initrd: string;
  /** The layers' files, bottom first. */
  layers: Array<{ meta: string; data: string | null }>;
  cpus: number;
  memoryMiB: number;
  diskMiB: number;
  accel: string;
  /** How the layers' ids are shifted (see MicrovmSpec.idShift). */
  idShift?: { base: number; size: number } | null;
  /** Its layers mapped into the guest (see MicrovmStart.dax). */
  dax?: boolean;
}

/**
 * What the guests of a template were booted with beyond its key: raised whenever the guest
 * kernel's arguments or its machine change (2: `tsc=reliable` under TCG; 3: no PIT under TCG; 4: init_on_free),
 * so no clone resumes a guest booted the old way.
 */
const BOOT_REVISION = 4;

/** A template's name (pure): a hash of its key. */
export function templateName(k: TemplateKey): string {
  return createHash('sha256')
    .update(
      JSON.stringify([BOOT_REVISION, k.kernel, k.initrd, k.layers, k.cpus, k.memoryMiB, k.diskMiB, k.accel, k.idShift ?? null, ...(k.dax ? ['dax'] : [])]),
    )
    .digest('hex')
    .slice(0, 24);
}

/** Written last into a template's directory: it is whole, made in this boot of the host. */
const READY = 'ready';

const bootId = (): Promise<string> => readFile('/proc/sys/kernel/random/boot_id', 'utf8').then((s) => s.trim());

interface Entry {
  made: Promise<string>;
  /** Creates cloning it now (it is not removed under them). */
  users: number;
  lastUse: number;
}

/**
 * A node's microVM templates (see makeTemplate), one directory each under `dir`: made on the
 * first create that needs one, by `make`, in a `.partial` directory renamed when whole; found
 * again after an edge restart; one made before the host last booted is made again (its RAM file
 * may not have reached the disk whole). At most `max` are kept: the least recently used one
 * that no create is cloning goes first (running clones keep their mapping of its RAM file).
 */
export class MicrovmTemplates {
  private readonly entries = new Map<string, Entry>();

  /** `onRemove`: told of each template directory removed (its spares go with it). */
  constructor(
    private readonly dir: string,
    private readonly max = 8,
    private readonly onRemove: (dir: string) => Promise<void> = async () => undefined,
  ) {}

  /** Runs `use` on the template `name`'s directory, made with `make(dir)` first if there is none. */
  async with<T>(name: string, make: (dir: string) => Promise<void>, use: (dir: string) => Promise<T>): Promise<T> {
    let e = this.entries.get(name);
    if (!e) {
      e = { made: this.make(name, make), users: 0, lastUse: 0 };
      this.entries.set(name, e);
      const mine = e;
      e.made.then(
        () => this.evict(),
        () => this.entries.get(name) === mine && this.entries.delete(name),
      );
    }
    e.users++;
    e.lastUse = Date.now();
    try {
      return await use(await e.made);
    } finally {
      e.users--;
    }
  }

  /** Removes a template (a clone of it failed: the next create makes it again). */
  async drop(name: string): Promise<void> {
    this.entries.delete(name);
    await this.onRemove(join(this.dir, name));
    await rm(join(this.dir, name), { recursive: true, force: true });
  }

  /** The names of the templates on disk (whole ones). */
  async list(): Promise<string[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    return names.filter((n) => existsSync(join(this.dir, n, READY)));
  }

  private async make(name: string, make: (dir: string) => Promise<void>): Promise<string> {
    const dir = join(this.dir, name);
    const boot = await bootId();
    if ((await readFile(join(dir, READY), 'utf8').catch(() => '')) === boot) return dir;
    await rm(dir, { recursive: true, force: true });
    const partial = `${dir}.partial`;
    await rm(partial, { recursive: true, force: true });
    await mkdir(partial, { recursive: true, mode: 0o700 });
    try {
      await make(partial);
      await writeFile(join(partial, READY), boot);
      await rename(partial, dir);
    } catch (e) {
      await rm(partial, { recursive: true, force: true });
      throw e;
    }
    return dir;
  }

  /** Keeps at most `max` on disk: the idle ones used least recently go (those from an earlier run of the edge first). */
  private async evict(): Promise<void> {
    const onDisk = await this.list();
    const idle = onDisk
      .map((name) => ({ name, e: this.entries.get(name) }))
      .filter(({ e }) => !e || e.users === 0)
      .sort((a, b) => (a.e?.lastUse ?? 0) - (b.e?.lastUse ?? 0));
    for (const { name } of idle.slice(0, Math.max(0, onDisk.length - this.max))) await this.drop(name);
  }
}
