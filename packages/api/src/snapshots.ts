import { z } from 'zod';
import { Image, ImageName, ListedImage } from './images.js';

/**
 * A snapshot: a sandbox's files as they are at the call (its writable layer frozen meanwhile;
 * it runs on), kept as an image of the caller's tenant that outlives the sandbox. A create
 * names it as `snapshot` (or as `image`): it gets the files, and the source's backend, user and
 * workdir where the create names none; its env is the source's image's and create's together.
 * A microVM's snapshot keeps its files, not its memory (a fork keeps both). Without `name`, one
 * is made (`snapshot-<sandbox>-<n>:latest`).
 */
export const CreateSnapshotRequest = z.strictObject({
  name: ImageName.optional(),
});
export type CreateSnapshotRequest = z.infer<typeof CreateSnapshotRequest>;

export const Snapshot = Image;
export type Snapshot = z.infer<typeof Snapshot>;

export const ListSnapshotsQuery = z.strictObject({
  /** Only those taken of this sandbox. */
  sandbox: z.string().min(1).max(64).optional(),
  /** Only the one of this name. */
  name: z.string().min(1).max(200).optional(),
});
export type ListSnapshotsQuery = z.infer<typeof ListSnapshotsQuery>;

export const ListSnapshotsResponse = z.object({ snapshots: z.array(ListedImage) });
export type ListSnapshotsResponse = z.infer<typeof ListSnapshotsResponse>;

/** The most snapshots one tenant keeps (an admin's are not limited). */
export const MAX_SNAPSHOTS_PER_TENANT = 1000;
