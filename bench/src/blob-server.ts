// A plain HTTP blob store for the layers benchmark: serves a directory's files with ranges and
// HEAD (no listings), counts the bytes it sent (GET /__served). Prints its URL. Usage: blob-server DIR
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';

const dir = process.argv[2] ?? '.';
let served = 0;
const server = createServer((req, res) => {
  void (async () => {
    const name = decodeURIComponent((req.url ?? '/').split('?')[0] ?? '/').replace(/^\/+/, '');
    if (name === '__served') return void res.end(String(served));
    const st = name === '' || name.includes('/') ? null : await stat(join(dir, name)).catch(() => null);
    if (!st?.isFile()) {
      res.writeHead(404);
      res.end();
      return;
    }
    const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    const start = m ? Number(m[1]) : 0;
    const end = m?.[2] ? Math.min(Number(m[2]), st.size - 1) : st.size - 1;
    res.writeHead(m ? 206 : 200, {
      'content-length': end - start + 1,
      'accept-ranges': 'bytes',
      'last-modified': st.mtime.toUTCString(),
      ...(m ? { 'content-range': `bytes ${start}-${end}/${st.size}` } : {}),
    });
    if (req.method === 'HEAD') return void res.end();
    served += end - start + 1;
    // 1 MiB reads (the stream's default is 64 KiB): a store's cost per byte, not per read call.
    await pipeline(createReadStream(join(dir, name), { start, end, highWaterMark: 1 << 20 }), res).catch(() => undefined);
  })();
});
server.listen(0, '127.0.0.1', () => console.log(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
