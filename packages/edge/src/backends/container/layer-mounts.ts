import { mkdir, readFile, rmdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';
import { digestHex, type LayerStore } from '@warren/images';
import type { Mounts } from '../../host/hostd.js';

/** Mounts each EROFS layer once per node and shares it with every sandbox that stacks it. */
export class LayerMounts {
  private readonly mounted = new Map<string, Promise<string>>();

  constructor(
    private readonly store: LayerStore,
    private readonly mounts: Mounts,
    readonly dir: string,
  ) {}

  /** Learns which layers are still mounted from an earlier run (after a restart). */
  async recover(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const info = await readFile('/proc/self/mountinfo', 'utf8');
    for (const line of info.split('\n')) {
      const target = line.split(' ')[4];
      if (!target?.startsWith(this.dir + '/')) continue;
      const hex = target.slice(this.dir.length + 1);
      if (/^[0-9a-f]{64}$/.test(hex)) this.mounted.set(`sha256:${hex}`, Promise.resolve(target));
    }
  }

  /** The mount point of a layer, mounting it on first use. */
  path(digest: string): Promise<string> {
    let p = this.mounted.get(digest);
    if (!p) {
      p = this.mount(digest);
      this.mounted.set(digest, p);
      p.catch(() => this.mounted.delete(digest));
    }
    return p;
  }

  /** Whether a mounted layer has bash (host view of read-only image content we built). */
  async hasFile(digest: string, rel: string): Promise<boolean> {
    return existsSync(join(await this.path(digest), rel));
  }

  private async mount(digest: string): Promise<string> {
    const target = join(this.dir, digestHex(digest));
    await mkdir(target, { recursive: true });
    if (!(await this.store.ensureMeta(digest))) throw new WarrenError('not_found', `layer ${digest} is not on this node and no blob store has it`);
    await this.mounts.erofs(this.store.layerPath(digest), target, this.store.dataPath(digest));
    return target;
  }

  async unmount(digest: string): Promise<void> {
    const p = this.mounted.get(digest);
    if (!p) return;
    this.mounted.delete(digest);
    const target = await p.catch(() => null);
    if (target) {
      await this.mounts.umount(target).catch(() => undefined);
      await rmdir(target).catch(() => undefined);
    }
  }

  async unmountAll(): Promise<void> {
    for (const [digest, p] of this.mounted) {
      const target = await p.catch(() => null);
      if (target) await this.mounts.umount(target).catch(() => undefined);
      this.mounted.delete(digest);
    }
  }
}
