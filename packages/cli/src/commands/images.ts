import { parseArgs } from 'node:util';
import { stat } from 'node:fs/promises';
import { createReadStream } from 'node:fs';
import { WarrenError } from '@warren/sdk';
import { registryAuth } from '../args.js';
import { client, DEFAULT_IMAGE_CACHE } from '../client.js';
import { fmtBytes, progressBar } from '../output.js';

/** `warren images [prepare | import | pull | rm [--force]]`. */
export async function run(rest: string[]): Promise<number> {
  if (rest[0] === 'prepare') {
    const { values } = parseArgs({ args: rest.slice(1), options: { 'image-cache': { type: 'string', default: DEFAULT_IMAGE_CACHE } } });
    const { prepareDefaultImages } = await import('@warren/images');
    const built = await prepareDefaultImages({ cacheDir: values['image-cache'], log: (m) => console.error(m) });
    for (const [name, { digest }] of built) console.log(`${name}  ${digest}`);
    return 0;
  }
  const w = await client();
  if (rest[0] === 'import' || rest[0] === 'pull') {
    const { values, positionals } = parseArgs({ args: rest.slice(1), allowPositionals: true, options: { name: { type: 'string' } } });
    const what = positionals[0];
    if (!what)
      throw new WarrenError(
        'invalid_argument',
        rest[0] === 'import' ? 'name a tarball: warren images import FILE --name NAME' : 'name an image: warren images pull REF',
      );
    const bar = progressBar();
    let image;
    if (rest[0] === 'import') {
      if (!values.name) throw new WarrenError('invalid_argument', '--name NAME is required');
      const size = (await stat(what)).size;
      let sent = 0;
      const upload = (async function* () {
        for await (const c of createReadStream(what)) {
          sent += (c as Buffer).length;
          bar(`uploading ${fmtBytes(sent)} / ${fmtBytes(size)}`, sent / size);
          yield c as Buffer;
        }
      })();
      image = await w.importImage(values.name, upload, { onProgress: (p) => p.layer && bar(`layer ${p.layer}/${p.layers}`, p.layer / (p.layers ?? 1)) });
    } else {
      image = await w.pullImage(what, {
        name: values.name,
        auth: registryAuth(),
        onProgress: (p) => p.layer && bar(`layer ${p.layer}/${p.layers}`, p.layer / (p.layers ?? 1)),
      });
    }
    bar.done();
    console.log(`${image.name}  ${image.layers.length} layers  ${fmtBytes(image.sizeBytes)}`);
    return 0;
  }
  if (rest[0] === 'rm') {
    // --force: delete it though live sandboxes were created from it (the server refuses otherwise).
    const { values, positionals } = parseArgs({ args: rest.slice(1), allowPositionals: true, options: { force: { type: 'boolean', short: 'f' } } });
    for (const n of positionals) await w.deleteImage(n, { force: values.force });
    return 0;
  }
  for (const i of await w.images())
    console.log(`${i.name.padEnd(28)} ${String(i.sizeBytes).padStart(12)}  used by ${String(i.usedBy).padStart(4)}  ${i.layers.join(',')}`);
  return 0;
}
