import { runFile } from './exec-file.js';

/**
 * mkfs.erofs arguments for an uncompressed layer of `dir`, extended attributes kept (the
 * overlay's opaque markers and the layer's own); `exclude` paths are relative to `dir`.
 */
export function mkfsErofsArgs(out: string, dir: string, exclude: string[] = [], excludeRegex: string[] = []): string[] {
  return ['--quiet', '-Enoinline_data', ...exclude.map((p) => `--exclude-path=${p}`), ...excludeRegex.map((r) => `--exclude-regex=${r}`), out, dir];
}

/** Builds an EROFS image of a directory (ownership and modes as they are on disk). */
export async function mkfsErofs(out: string, dir: string, signal?: AbortSignal, exclude: string[] = [], excludeRegex: string[] = []): Promise<void> {
  await runFile('mkfs.erofs', mkfsErofsArgs(out, dir, exclude, excludeRegex), { signal });
}
