import { runFile } from './exec-file.js';

export interface MkfsOptions {
  /**
   * Put file data in this separate blob file (chunk-based, 64 KiB chunks) and only metadata in
   * the image: the image stays small and local, the data can be read on demand elsewhere.
   */
  data?: string;
  /** Paths relative to the source directory left out. */
  exclude?: string[];
  /** Regular expressions (on paths relative to the source) left out. */
  excludeRegex?: string[];
  signal?: AbortSignal;
}

/**
 * mkfs.erofs arguments for an uncompressed layer of `dir`, extended attributes kept (the
 * overlay's opaque markers and the layer's own).
 */
export function mkfsErofsArgs(out: string, dir: string, o: Omit<MkfsOptions, 'signal'> = {}): string[] {
  return [
    '--quiet',
    '-Enoinline_data',
    ...(o.data ? ['--chunksize=65536', `--blobdev=${o.data}`] : []),
    ...(o.exclude ?? []).map((p) => `--exclude-path=${p}`),
    ...(o.excludeRegex ?? []).map((r) => `--exclude-regex=${r}`),
    out,
    dir,
  ];
}

/** Builds an EROFS image of a directory (ownership and modes as they are on disk). */
export async function mkfsErofs(out: string, dir: string, o: MkfsOptions = {}): Promise<void> {
  await runFile('mkfs.erofs', mkfsErofsArgs(out, dir, o), { signal: o.signal });
}
