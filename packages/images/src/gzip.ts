import { PassThrough } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { WarrenError } from '@warren/api';

/**
 * A byte stream, gunzipped when it starts with the gzip magic and passed through otherwise;
 * broken gzip is an invalid_argument naming `what`.
 */
export async function* gunzipIfCompressed(source: AsyncIterable<Buffer>, what = 'the upload'): AsyncGenerator<Buffer> {
  const it = source[Symbol.asyncIterator]();
  let head = Buffer.alloc(0);
  let done = false;
  while (head.length < 2 && !done) {
    const r = await it.next();
    if (r.done) done = true;
    else head = Buffer.concat([head, r.value]);
  }
  const all = (async function* () {
    if (head.length) yield head;
    if (!done) for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
  })();
  if (head[0] !== 0x1f || head[1] !== 0x8b) {
    yield* all;
    return;
  }
  const out = new PassThrough();
  pipeline(all, createGunzip(), out).catch(() => undefined);
  try {
    for await (const c of out) yield c as Buffer;
  } catch (e) {
    throw e instanceof WarrenError ? e : new WarrenError('invalid_argument', `${what} is not valid gzip: ${(e as Error).message}`);
  }
}
