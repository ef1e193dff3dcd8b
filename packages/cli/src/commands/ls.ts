import { sandbox } from '../client.js';

/** `warren ls ID [PATH]`. */
export async function run(rest: string[]): Promise<number> {
  const sb = await sandbox(rest[0]);
  for (const e of await sb.files.list(rest[1] ?? '/')) {
    console.log(
      `${e.type.padEnd(7)} ${(e.mode & 0o7777).toString(8).padStart(4, '0')} ${String(e.size).padStart(10)} ${e.name}${e.target ? ` -> ${e.target}` : ''}`,
    );
  }
  return 0;
}
