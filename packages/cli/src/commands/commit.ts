import { parseArgs } from 'node:util';
import { WarrenError } from '@warren/sdk';
import { sandbox } from '../client.js';
import { fmtBytes } from '../output.js';

/** `warren commit ID NAME`: the sandbox's changes as a new image. */
export async function run(rest: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: { exclude: { type: 'string', multiple: true } } });
  const [id, name] = positionals;
  if (!id || !name) throw new WarrenError('invalid_argument', 'usage: warren commit SANDBOX NAME [--exclude PATH]...');
  const image = await (await sandbox(id)).commit(name, { exclude: values.exclude });
  console.log(`${image.name}  ${image.layers.length} layers  ${fmtBytes(image.sizeBytes)}`);
  return 0;
}
