import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/api';
import type { LayerInfo, LayerStore } from '@warren/images';
import { FORK_BASE_ID } from '../backend.js';

const run = promisify(execFile);

/**
 * A node's container fork bases: one directory each under `dir`, a frozen copy of a sandbox's
 * writable layer (in overlay form: whiteouts and opaque directories as overlay writes them), which
 * every fork stacks read-only under an empty writable layer of its own. Made in a `.partial`
 * directory renamed when whole, so a base that exists is complete; one left `.partial` by a crash
 * is removed at open.
 */
export class ForkBases {
  /** Each base's image layer once made (baseLayer), so a base becomes a layer once. */
  private readonly layers = new Map<string, Promise<LayerInfo>>();

  constructor(
    private readonly dir: string,
    private readonly store: LayerStore,
  ) {}

  async open(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    for (const n of await readdir(this.dir)) if (n.endsWith('.partial')) await rm(join(this.dir, n), { recursive: true, force: true });
  }

  private where(baseId: string): string {
    if (!FORK_BASE_ID.test(baseId)) throw new WarrenError('invalid_argument', `not a fork base id: ${baseId}`);
    return join(this.dir, baseId);
  }

  /** A base's directory; `not_found` when this node has no such base. */
  async path(baseId: string): Promise<string> {
    const p = this.where(baseId);
    if (!existsSync(p)) throw new WarrenError('not_found', `fork base ${baseId} is not on this node`, { base: baseId });
    return p;
  }

  /**
   * Copies `upper` (a view of a frozen writable layer) as base `baseId`: `cp -a` keeps owners,
   * modes, times, xattrs (overlay's own among them) and device nodes (whiteouts); reflinks share
   * the data where the file system can.
   */
  async make(baseId: string, upper: string): Promise<void> {
    const target = this.where(baseId);
    if (existsSync(target)) throw new WarrenError('conflict', `fork base ${baseId} exists`, { base: baseId });
    const partial = `${target}.partial`;
    await rm(partial, { recursive: true, force: true });
    try {
      await run('cp', ['-a', '--reflink=auto', '--no-target-directory', upper, partial], { maxBuffer: 1 << 20 });
      await rename(partial, target);
    } catch (e) {
      await rm(partial, { recursive: true, force: true });
      const stderr = (e as { stderr?: string }).stderr ?? '';
      throw new WarrenError('internal', 'the fork base could not be made', {}, { cause: new Error(`cp: ${stderr.slice(0, 500) || String(e)}`) });
    }
  }

  /** A base's files as an image layer (made once per base while the layer store keeps it), pinned for the caller. */
  async layer(baseId: string, opts: { exclude: string[]; excludeRegex: string[] }): Promise<LayerInfo> {
    const dir = await this.path(baseId);
    const key = `${baseId}\0${JSON.stringify(opts)}`;
    const known = this.layers.get(key);
    const info = known ? await known.catch(() => null) : null;
    if (info && (await this.store.hasLayer(info.digest))) {
      this.store.pin(info.digest);
      return info;
    }
    const made = this.store.addLayerDir(dir, opts.exclude, opts.excludeRegex);
    this.layers.set(key, made);
    made.catch(() => this.layers.get(key) === made && this.layers.delete(key));
    return made;
  }

  /** Removes a base (no sandbox stands on it any more); a missing one is no error. */
  async remove(baseId: string): Promise<void> {
    if (!FORK_BASE_ID.test(baseId)) return;
    for (const k of this.layers.keys()) if (k.startsWith(`${baseId}\0`)) this.layers.delete(k);
    await rm(join(this.dir, baseId), { recursive: true, force: true });
  }

  /** The bases on this node. */
  async list(): Promise<string[]> {
    return (await readdir(this.dir).catch(() => [] as string[])).filter((n) => FORK_BASE_ID.test(n));
  }
}
