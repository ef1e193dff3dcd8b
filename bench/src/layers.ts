// Warren layers benchmark: a sandbox from a 1 GiB image that reads 5 % of it, started cold with
// on-demand layer data, after an eager full download, and from the node's cache; and create time
// with 50 workspace layers over one base. On-demand data comes from a static HTTP server (nginx)
// and from a real OCI registry (docker-registry). Prints numbers; asserts nothing.
// Usage: npm run bench:layers [-- --gib 1 --workspaces 50]
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { cpus, totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { Warren } from '@warren/sdk';
import { startWarren, type RunningWarren } from '@warren/server';
import { fmt, pct } from './stats.js';

const { values } = parseArgs({ options: { gib: { type: 'string', default: '1' }, workspaces: { type: 'string', default: '50' } } });
const FILES = 64;
const FILE_BYTES = Math.round((Number(values.gib) * 2 ** 30) / FILES);
const READ_FILES = 3; // 3 of 64 files: ~4.7 % of the image
const COLD_RUNS = 3;
const WORKSPACES = Number(values.workspaces);
const quiet = { info: () => undefined, warn: () => undefined };
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`;

/** The blob store: nginx serving a directory (ranges, sendfile), as a static file server would. */
async function startNginx(dir: string, root: string): Promise<{ url: string; stop: () => void }> {
  await mkdir(dir, { recursive: true });
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  await writeFile(
    conf,
    [
      'daemon off; master_process off; worker_processes 1;',
      `error_log ${dir}/error.log error; pid ${dir}/nginx.pid;`,
      'events { worker_connections 256; }',
      `http { access_log off; sendfile on; tcp_nopush on; server { listen 127.0.0.1:${port}; root ${root}; } }`,
    ].join('\n'),
  );
  const child = spawn(existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : 'nginx', ['-c', conf, '-p', dir], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}`;
  for (
    let i = 0;
    !(await fetch(`${url}/`).then(
      () => true,
      () => false,
    ));
    i++
  ) {
    if (i > 100) throw new Error('nginx did not start');
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url, stop: () => child.kill() };
}

async function freePort(): Promise<number> {
  return new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

/** A real OCI registry (the docker-registry package) on loopback, storing under `dir`. */
async function startRegistry(dir: string): Promise<{ port: number; stop: () => void }> {
  await mkdir(dir, { recursive: true });
  const port = await freePort();
  await writeFile(
    join(dir, 'config.yml'),
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${dir}/data\nhttp:\n  addr: 127.0.0.1:${port}\n`,
  );
  const child = spawn('docker-registry', ['serve', join(dir, 'config.yml')], { stdio: 'ignore' });
  for (
    let i = 0;
    !(await fetch(`http://127.0.0.1:${port}/v2/`).then(
      (r) => r.ok,
      () => false,
    ));
    i++
  ) {
    if (i > 100) throw new Error('the registry did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { port, stop: () => child.kill() };
}

async function node(dataDir: string, blobUrl?: string): Promise<{ w: RunningWarren; c: Warren }> {
  await mkdir(dataDir, { recursive: true });
  await chmod(dataDir, 0o711);
  const w = await startWarren({
    port: 0,
    host: '127.0.0.1',
    dataDir,
    imageCacheDir: process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images',
    adminKey: 'bench',
    images: ['busybox:latest'],
    blobStore: blobUrl ? { url: blobUrl, cacheMaxBytes: 4 * 2 ** 30 } : undefined,
    logger: quiet,
  });
  return { w, c: new Warren({ url: w.url, apiKey: 'bench' }) };
}

/** Create + the command that reads 5 % of the image: time to first command, and bytes moved. */
async function firstCommand(c: Warren, image: string): Promise<{ createMs: number; readMs: number }> {
  const t0 = performance.now();
  const sb = await c.sandboxes.create({ image });
  const t1 = performance.now();
  const files = Array.from({ length: READ_FILES }, (_, i) => `/data/f${i * 20}`).join(' ');
  const r = await sb.exec(`cat ${files} > /dev/null`);
  const t2 = performance.now();
  if (r.exitCode !== 0) throw new Error(r.stderr);
  await sb.delete();
  return { createMs: t1 - t0, readMs: t2 - t1 };
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const root = await mkdtemp(join(tmpdir(), 'warren-bench-layers-'));
  await chmod(root, 0o711);
  const nodes: RunningWarren[] = [];
  const stops: (() => void)[] = [];
  try {
    // The source node holds the image: busybox + one layer of 64 files of random data.
    const src = await node(join(root, 'source'));
    nodes.push(src.w);
    const files = join(root, 'files');
    await mkdir(join(files, 'data'), { recursive: true });
    for (let i = 0; i < FILES; i++)
      spawnSync('head', ['-c', String(FILE_BYTES), '/dev/urandom'], {
        stdio: ['ignore', (await import('node:fs')).openSync(join(files, 'data', `f${i}`), 'w'), 'inherit'],
      });
    const tar = spawn('tar', ['-C', files, '-cf', '-', 'data'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const t0 = performance.now();
    const layer = await src.c.uploadLayer('bench/data', tar.stdout as AsyncIterable<Buffer>);
    console.log(`made a ${mib(layer.sizeBytes)} layer (${FILES} files) from tar in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    await rm(files, { recursive: true, force: true });
    const base = (await src.c.images()).find((i) => i.name === 'busybox:latest')?.layers ?? [];
    const layers = [...base, layer.digest];
    const blobs = join(root, 'source', 'layers', 'blobs');
    const store = await startNginx(join(root, 'nginx'), blobs);
    stops.push(store.stop);
    const url = store.url;
    // Bytes fetched on demand: what the node's cache holds (each block is fetched once, and nothing
    // is evicted here).
    const cacheBytes = (dir: string) => async (): Promise<number> => {
      const cache = join(root, dir, 'cache', 'blobs');
      let n = 0;
      for (const f of await readdir(cache).catch(() => [] as string[])) if (f.endsWith('.data')) n += (await stat(join(cache, f))).blocks * 512;
      return n;
    };

    // Cold, on demand: metadata fetched when the image is named, data when read. From the plain
    // HTTP store, then from a registry the layers were published to.
    // Each cold start on a fresh node (its own empty cache), COLD_RUNS times; then the cached
    // starts on the last of them.
    const onDemand = async (label: string, storeUrl: string, dir: string): Promise<{ cold: number; disk: number }> => {
      const colds: number[] = [];
      let od: Awaited<ReturnType<typeof node>> | null = null;
      for (let run = 0; run < COLD_RUNS; run++) {
        if (od) {
          await od.w.close();
          nodes.splice(nodes.indexOf(od.w), 1);
          await rm(join(root, `${dir}-${run - 1}`), { recursive: true, force: true });
        }
        od = await node(join(root, `${dir}-${run}`), storeUrl);
        nodes.push(od.w);
        spawnSync('sync'); // writes still going to disk would slow the reads below
        const p0 = performance.now();
        await fetch(`${od.w.url}/v1/images/${encodeURIComponent('bench:1')}`, {
          method: 'PUT',
          headers: { authorization: 'Bearer bench', 'content-type': 'application/json' },
          body: JSON.stringify({ layers }),
        }).then((r) => (r.ok ? r.json() : Promise.reject(new Error(`${r.status}`))));
        const metaMs = performance.now() - p0;
        const cold = await firstCommand(od.c, 'bench:1');
        await new Promise((r) => setTimeout(r, 500)); // read-ahead still in flight counts too
        const coldBytes = await cacheBytes(`${dir}-${run}`)();
        const coldMs = metaMs + cold.createMs + cold.readMs;
        colds.push(coldMs);
        console.log(
          `${label}, cold #${run + 1}: name image ${fmt(metaMs)} + create ${fmt(cold.createMs)} + read 5 % ${fmt(cold.readMs)} = ${fmt(coldMs)}; fetched ${mib(coldBytes)} of ${mib(layer.sizeBytes)} (${((100 * coldBytes) / layer.sizeBytes).toFixed(1)} %)`,
        );
      }
      if (!od) throw new Error('no cold run');
      const fetchedBefore = await cacheBytes(`${dir}-${COLD_RUNS - 1}`)();
      const warm: number[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await firstCommand(od.c, 'bench:1');
        warm.push(r.createMs + r.readMs);
      }
      // Cached on the node's disk but not in memory: what "already cached" means after a while.
      const disk: number[] = [];
      for (let i = 0; i < 3; i++) {
        spawnSync('sh', ['-c', 'sync; echo 3 > /proc/sys/vm/drop_caches']);
        const r = await firstCommand(od.c, 'bench:1');
        disk.push(r.createMs + r.readMs);
      }
      const more = (await cacheBytes(`${dir}-${COLD_RUNS - 1}`)()) - fetchedBefore;
      console.log(
        `${label}: cold p50 ${fmt(pct(colds, 50))} (n=${COLD_RUNS}); cached in memory (n=5) create + read p50 ${fmt(pct(warm, 50))}; on disk, page cache dropped (n=3) p50 ${fmt(pct(disk, 50))}; fetched ${mib(Math.max(0, more))} more`,
      );
      return { cold: pct(colds, 50), disk: pct(disk, 50) };
    };
    const http = await onDemand('HTTP store (nginx)', url, 'ondemand');

    const registry = await startRegistry(join(root, 'registry'));
    stops.push(registry.stop);
    const oci = `oci+http://127.0.0.1:${registry.port}/bench/layers`;
    const t1 = performance.now();
    await src.c.publishLayers(oci, { layers });
    console.log(`published the image's layers to the registry in ${fmt(performance.now() - t1)}`);
    const reg = await onDemand('registry store (docker-registry)', oci, 'ondemand-oci');

    // Eager: download the layer whole, then start.
    const eg = await node(join(root, 'eager'));
    nodes.push(eg.w);
    spawnSync('sync');
    let eagerBytes = 0;
    const e0 = performance.now();
    for (const ext of ['erofs', 'data']) {
      const dest = join(root, 'eager', 'layers', 'blobs', `${layer.digest.slice(7)}.${ext}`);
      const res = await fetch(`${url}/${layer.digest.slice(7)}.${ext}`);
      await pipeline(
        Readable.fromWeb(res.body as never),
        async function* (src: AsyncIterable<Buffer>) {
          for await (const c of src) {
            eagerBytes += c.length;
            yield c;
          }
        },
        createWriteStream(`${dest}.tmp`),
      );
      await rename(`${dest}.tmp`, dest);
    }
    const fetchMs = performance.now() - e0;
    await fetch(`${eg.w.url}/v1/images/${encodeURIComponent('bench:1')}`, {
      method: 'PUT',
      headers: { authorization: 'Bearer bench', 'content-type': 'application/json' },
      body: JSON.stringify({ layers }),
    });
    const eager = await firstCommand(eg.c, 'bench:1');
    console.log(
      `eager full download: fetch ${fmt(fetchMs)} + create ${fmt(eager.createMs)} + read 5 % ${fmt(eager.readMs)} = ${fmt(fetchMs + eager.createMs + eager.readMs)}; fetched ${mib(eagerBytes)}`,
    );
    const eagerMs = fetchMs + eager.createMs + eager.readMs;
    for (const [label, r] of [
      ['HTTP store', http],
      ['registry store', reg],
    ] as const) {
      console.log(
        `ratios, ${label}: cold on-demand / cached on disk = ${(r.cold / r.disk).toFixed(2)}x, eager / cold on-demand = ${(eagerMs / r.cold).toFixed(2)}x`,
      );
    }

    // 50 workspace layers over one base.
    const names: string[] = [];
    for (let i = 0; i < WORKSPACES; i++) {
      const dir = join(root, 'ws', `w${i}`);
      await mkdir(join(dir, 'workspace', `task-${i}`), { recursive: true });
      spawnSync('sh', ['-c', `for f in a b c d; do echo task ${i} $f > ${dir}/workspace/task-${i}/$f.txt; done`]);
      const t = spawn('tar', ['-C', dir, '-cf', '-', 'workspace'], { stdio: ['ignore', 'pipe', 'inherit'] });
      names.push((await src.c.uploadLayer(`bench/ws-${i}`, t.stdout as AsyncIterable<Buffer>)).name);
    }
    for (const [label, ls] of [
      ['0 extra layers', [] as string[]],
      [`${WORKSPACES} workspace layers`, names],
    ] as const) {
      const lat: number[] = [];
      for (let i = 0; i < 12; i++) {
        const s = performance.now();
        const sb = await src.c.sandboxes.create({ image: 'busybox:latest', layers: [...ls] });
        lat.push(performance.now() - s);
        if (i === 0 && ls.length) {
          const seen = (await sb.exec('ls /workspace | wc -l')).stdout.trim();
          if (seen !== String(ls.length)) throw new Error(`saw ${seen} workspaces`);
        }
        await sb.delete();
      }
      console.log(`create busybox + ${label} (n=12, first is cold): p50 ${fmt(pct(lat.slice(1), 50))}, first ${fmt(lat[0] ?? NaN)}`);
    }
  } finally {
    for (const n of nodes.reverse()) await n.close().catch(() => undefined);
    for (const stop of stops) stop();
    await rm(root, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
