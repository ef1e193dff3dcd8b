import { parseArgs } from 'node:util';
import { createReadStream } from 'node:fs';
import { WarrenError } from '@warren/sdk';
import { registryAuth } from '../args.js';
import { client } from '../client.js';
import { fmtBytes } from '../output.js';

/** `warren layers [push | rm | publish]`. */
export async function run(rest: string[]): Promise<number> {
  const w = await client();
  if (rest[0] === 'push') {
    const { values, positionals } = parseArgs({ args: rest.slice(1), allowPositionals: true, options: { name: { type: 'string' } } });
    if (!positionals[0] || !values.name) throw new WarrenError('invalid_argument', 'usage: warren layers push FILE.tar --name NAME');
    const l = await w.uploadLayer(values.name, createReadStream(positionals[0]) as AsyncIterable<Buffer>);
    console.log(`${l.name}  ${l.digest}  ${fmtBytes(l.sizeBytes)}`);
    return 0;
  }
  if (rest[0] === 'rm') {
    for (const n of rest.slice(1)) await w.deleteLayer(n);
    return 0;
  }
  if (rest[0] === 'publish') {
    const { values, positionals } = parseArgs({
      args: rest.slice(1),
      allowPositionals: true,
      options: { to: { type: 'string' }, image: { type: 'string' } },
    });
    if (!values.to || (!values.image && !positionals.length)) {
      throw new WarrenError('invalid_argument', 'usage: warren layers publish --to oci://HOST/REPO [--image NAME] [LAYER...]');
    }
    for (const l of await w.publishLayers(values.to, { image: values.image, layers: positionals.length ? positionals : undefined, auth: registryAuth() })) {
      console.log(`${l.digest}  ${l.sent ? 'sent' : 'already there'}`);
    }
    return 0;
  }
  for (const l of await w.layers()) console.log(`${l.name.padEnd(28)} ${String(l.sizeBytes).padStart(12)}  ${l.digest}`);
  return 0;
}
