import { startWarren } from '@warren/server';
import { Warren } from '@warren/sdk';
import { mkdtempSync } from 'node:fs';
const dataDir = mkdtempSync('/tmp/warren-exp-');
const w = await startWarren({
  port: 0,
  host: '127.0.0.1',
  dataDir,
  imageCacheDir: '/var/cache/warren/images',
  adminKey: 'k',
  images: ['debian-python:latest'],
  memoryFloorMiB: 0,
  swap: { zramMiB: 1024 },
  logger: {
    info() {},
    warn(m, x) {
      console.log(m, x);
    },
  },
});
const c = new Warren({ url: w.url, apiKey: 'k' });
const sb = await c.sandboxes.create({ image: 'debian-python:latest' });
try {
  const sh = await sb.shell();
  void sb.exec(['python3', '-c', 'import time; time.sleep(600)']).catch(() => {});
  await new Promise((r) => setTimeout(r, 800));
  const P = [],
    R = [],
    F = [];
  for (let i = 0; i < 15; i++) {
    let t = performance.now();
    await sb.pause();
    P.push(performance.now() - t);
    t = performance.now();
    await sb.resume();
    R.push(performance.now() - t);
    await sb.pause();
    t = performance.now();
    await sh.exec('echo hi');
    F.push(performance.now() - t);
  }
  const med = (a) => a.sort((x, y) => x - y)[a.length >> 1].toFixed(1);
  console.log('pause', med(P), 'resume', med(R), 'first cmd', med(F));
} finally {
  await w.close();
}
