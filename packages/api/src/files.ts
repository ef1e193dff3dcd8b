import { z } from 'zod';
import { AbsPath } from './sandbox.js';

/** A yes-or-no query parameter: `1` or `true` is yes, `0` or `false` no. */
export const QueryFlag = z.enum(['0', '1', 'true', 'false']).transform((v) => v === '1' || v === 'true');

export const FilePathQuery = z.strictObject({ path: AbsPath });
export const WriteFileQuery = z.strictObject({
  path: AbsPath,
  mode: z
    .string()
    .regex(/^0?[0-7]{1,4}$/, 'mode is octal, e.g. 0644')
    .optional(),
});
export const ListFilesQuery = z.strictObject({
  path: AbsPath,
  depth: z.coerce.number().int().min(1).max(32).optional(),
});
export const DeleteFileQuery = z.strictObject({ path: AbsPath, recursive: QueryFlag.optional() });
export const MkdirRequest = z.strictObject({ path: AbsPath });
export const MoveRequest = z.strictObject({ from: AbsPath, to: AbsPath });

export const FileEntry = z.object({
  name: z.string(),
  path: z.string(),
  type: z.enum(['file', 'dir', 'symlink', 'other']),
  size: z.number(),
  mode: z.number().int(),
  mtime: z.string(),
  target: z.string().optional(),
  /** Its owner's uid and gid (absent from a sandbox whose agent is older). */
  uid: z.number().int().optional(),
  gid: z.number().int().optional(),
  /** Its extended attributes in the user namespace (`user.…`), when it has any: at most 64 of at most 4 KiB each. */
  xattrs: z.record(z.string(), z.string()).optional(),
});
export type FileEntry = z.infer<typeof FileEntry>;
export const ListFilesResponse = z.object({ entries: z.array(FileEntry) });
