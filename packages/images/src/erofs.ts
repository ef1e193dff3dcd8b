import { runFile } from './exec-file.js';

/** mkfs.erofs arguments for an uncompressed, reproducible-enough layer of `dir`. */
export function mkfsErofsArgs(out: string, dir: string): string[] {
  return ['--quiet', '-x-1', '-Enoinline_data', out, dir];
}

/** Builds an EROFS image of a directory (ownership and modes as they are on disk). */
export async function mkfsErofs(out: string, dir: string, signal?: AbortSignal): Promise<void> {
  await runFile('mkfs.erofs', mkfsErofsArgs(out, dir), { signal });
}
