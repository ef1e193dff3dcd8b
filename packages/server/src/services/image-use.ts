import { WarrenError, type Image, type ListedImage, type SandboxState } from '@warren/api';
import type { Store } from '../store/store.js';
import type { Caller } from './sandboxes.js';

/** How many sandbox ids a refused delete names. */
const NAMED = 3;

/** Whose sandboxes an image's use is counted over: the caller's tenant's; an admin's key, every tenant's. */
const scope = (caller: Caller): string | null => (caller.role === 'admin' ? null : caller.tenant);

/**
 * Who uses an image: the live sandboxes (creating, running, paused) created from it, counted
 * where the caller may look (its tenant's sandboxes; an admin's key: every tenant's), so that
 * no tenant learns of another's.
 */
export class ImageUse {
  constructor(private readonly store: Pick<Store, 'sandboxImages'>) {}

  /** Images as the lists show them: each with how many live sandboxes were created from it (one query for all). */
  async listed(caller: Caller, images: Image[]): Promise<ListedImage[]> {
    const counts = await this.store.sandboxImages.counts(scope(caller));
    return images.map((i) => ({ ...i, usedBy: counts.get(i.name) ?? 0 }));
  }

  /**
   * Refuses (conflict, details {image, sandboxes}) a delete of `name` while sandboxes in the
   * caller's view were created from it: live ones, or only those in `states`.
   */
  async refuseWhileUsed(caller: Caller, name: string, what: 'image' | 'snapshot', states?: SandboxState[]): Promise<void> {
    const { count, ids } = await this.store.sandboxImages.of(name, scope(caller), NAMED, states);
    if (!count) return;
    const some = ids.join(', ') + (count > ids.length ? ', …' : '');
    throw new WarrenError(
      'conflict',
      `${count} ${states ? states.join(' or ') : 'live'} sandbox${count === 1 ? ' was' : 'es were'} created from ${what} "${name}" (${some}): delete them first, or delete it with force=1 (they keep its layers while they live)`,
      { image: name, sandboxes: count },
    );
  }
}
