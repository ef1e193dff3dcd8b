import type { CreateSnapshotRequest, Image, ListSnapshotsQuery, ListedImage, SandboxState } from '@warren/api';
import { MAX_SNAPSHOTS_PER_TENANT, WarrenError } from '@warren/api';
import type { ImageCatalogue } from '@warren/images';
import type { ImageService } from './images.js';
import type { ImageUse } from './image-use.js';
import type { Caller, SandboxService } from './sandboxes.js';

/** A snapshot is an image: a runner key makes none (as it commits none), nor deletes one. */
function noRunner(caller: Caller, what: string): void {
  if (caller.role === 'runner') throw new WarrenError('permission_denied', `a runner key cannot ${what} (a snapshot is an image: use a builder key)`);
}

/** A snapshot's name when the request gives none (pure): the sandbox's, and when, as a tag. */
export const snapshotName = (sandbox: string, nowMs: number): string => `snapshots/${sandbox.toLowerCase()}:${nowMs.toString(36)}`;

/**
 * Snapshots: a sandbox's files kept as an image of its tenant's (a commit with the sandbox's env,
 * user, workdir and backend kept beside it) that outlives the sandbox; a create names it as
 * `snapshot`. A tenant keeps at most its quota's `snapshots` (MAX_SNAPSHOTS_PER_TENANT at most).
 */
export class SnapshotService {
  /** Snapshots being made now, per tenant (this replica's). */
  private readonly making = new Map<string, number>();

  constructor(
    private readonly sandboxes: SandboxService,
    private readonly images: ImageService,
    private readonly catalogue: ImageCatalogue,
    private readonly use: ImageUse,
  ) {}

  async create(caller: Caller, id: string, req: CreateSnapshotRequest): Promise<Image> {
    noRunner(caller, 'make snapshots');
    const { sid, edge, rec } = await this.sandboxes.reach(caller, id);
    const name = req.name ?? snapshotName(rec.id, Date.now());
    const cur = await this.catalogue.getImage(name);
    // A snapshot of the same name is replaced (as E2B's is); an image that is not one is not.
    if (cur && (!cur.snapshot || cur.tenant !== caller.tenant))
      throw new WarrenError('conflict', `the name "${name}" is an image's, not a snapshot of this tenant's`, { name });
    const most = Math.min(caller.quota.snapshots ?? MAX_SNAPSHOTS_PER_TENANT, MAX_SNAPSHOTS_PER_TENANT);
    // Those being made count too (a commit takes a while): snapshots at once cannot all pass on one count.
    const making = this.making.get(caller.tenant) ?? 0;
    if (!cur && caller.role !== 'admin' && (await this.mine(caller)).length + making >= most)
      throw new WarrenError('resource_exhausted', `this tenant keeps at most ${most} snapshots: delete some first`, { maxSnapshots: most });
    this.making.set(caller.tenant, (this.making.get(caller.tenant) ?? 0) + 1);
    try {
      const image = await this.images.commit(
        edge,
        sid,
        rec.layers,
        caller.tenant,
        { name },
        { ...(rec.imageEnv ?? {}), ...rec.env },
        { snapshot: { source: rec.id, backend: rec.backend, user: rec.user, workdir: rec.workdir } },
      );
      this.sandboxes.events?.snapshotted(rec, name);
      return image;
    } finally {
      const left = (this.making.get(caller.tenant) ?? 1) - 1;
      if (left > 0) this.making.set(caller.tenant, left);
      else this.making.delete(caller.tenant);
    }
  }

  /** The caller's snapshots (an admin's: every tenant's), newest first, each with who uses it. */
  async list(caller: Caller, q: ListSnapshotsQuery = {}): Promise<ListedImage[]> {
    const mine = (await this.mine(caller))
      .filter((i) => (q.sandbox === undefined || i.snapshot?.source === q.sandbox) && (q.name === undefined || i.name === q.name))
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    return this.use.listed(caller, mine);
  }

  /**
   * Deletes the caller's snapshot; refused (conflict) while sandboxes in the caller's view were
   * created from it (live ones, or those in `refuseWhile`), unless `force`.
   */
  async delete(caller: Caller, name: string, o: { force?: boolean; refuseWhile?: SandboxState[] } = {}): Promise<void> {
    noRunner(caller, 'delete snapshots');
    const img = await this.catalogue.getImage(name);
    if (!img?.snapshot || (caller.role !== 'admin' && img.tenant !== caller.tenant))
      throw new WarrenError('not_found', `snapshot "${name}" does not exist`, { snapshot: name });
    if (!o.force) await this.use.refuseWhileUsed(caller, name, 'snapshot', o.refuseWhile);
    await this.images.deleteImage(name);
  }

  private async mine(caller: Caller): Promise<Image[]> {
    return (await this.catalogue.listImages()).filter((i) => i.snapshot && (caller.role === 'admin' || i.tenant === caller.tenant));
  }
}
