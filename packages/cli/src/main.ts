#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { createInterface } from 'node:readline';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { createReadStream } from 'node:fs';
import { connect, WarrenError, type Sandbox } from '@warren/sdk';
import { prepareDefaultImages, DEFAULT_IMAGES, type DefaultImageName } from '@warren/images';
import { down, up } from './up.js';

const DEFAULT_DATA_DIR = process.env.WARREN_DATA_DIR ?? '/var/lib/warren';
const DEFAULT_IMAGE_CACHE = process.env.WARREN_IMAGE_CACHE ?? '/var/cache/warren/images';

const USAGE = `warren — sandboxes for agents

  warren up [--port 7070] [--host 127.0.0.1] [--data-dir DIR] [--keep-sandboxes] [--runtime native|runc]
            [--blob-url URL [--blob-cache-gib 20]]   read layers this node lacks on demand from a blob store:
                                     a registry repository oci://HOST/REPO (oci+http:// for plain HTTP), or
                                     another node's http://HOST:7070/v1/blobs/ with WARREN_BLOB_KEY=its admin key;
                                     WARREN_BLOB_USER/WARREN_BLOB_PASSWORD for a store that wants Basic auth
            [--no-network]            sandboxes get loopback only
            [--egress-hosts FILE]     names the egress proxy resolves from FILE (hosts(5) lines) before DNS
            [--sandbox-subnet CIDR]   the sandboxes' /18 (default: a free one in 10.200.0.0/13)
            [--dns-rate N]            DNS queries a sandbox may send per second, a burst of 2N first (default 1000)
            [--zram-swap-mib N]       compressed swap in RAM for paused sandboxes (set up now, removed at stop;
                                     default: half the memory, unless the host has swap) [--no-zram-swap]
            [--cpu-overcommit 64] [--cpu-busy 0.9] [--memory-overcommit 1.5] [--memory-floor-mib N]
            [--sandbox-disk-gib N] [--no-disk-quotas]   sandboxes' writable layers on a btrfs image of N GiB
                                     (sparse; default 80 % of free space past the reserve), each limited to its diskMiB (default 10 GiB)
            [--disk-reserve-mib N]    kept free on the data disk for Warren's own state: imports, uploads, pulls
                                     and commits that would reach into it are refused (default 5 %, 256 MiB to 2 GiB)
            [--fn-pool IMAGE[:LANGUAGE]=N]...   FnCall workers kept warm (python: its zygote started too)
            [--fn-max-workers N] [--fn-queue-limit N]   FnCall workers per image; calls a tenant may have waiting
            [--pull-registries HOST[:PORT],...]   registries non-admin keys may pull from (default: none)
  warren down [--data-dir DIR]
  warren create IMAGE [--layer NAME]... [--cpu N] [--memory MiB] [--ttl S] [--label k=v]... [--env K=V]... [--user U] [--workdir DIR]
                [--egress deny|allow] [--allow DOMAIN|CIDR]... [--deny DOMAIN|CIDR]...
  warren network ID [--egress deny|allow] [--allow RULE]... [--deny RULE]...   replace a running sandbox's rules
  warren exec ID [--session SS] [--timeout MS] -- CMD [ARG...]   (one arg: run by a shell)
  warren shell ID                    a persistent shell: one command per line
  warren cp SRC DST                  one side is ID:/path
  warren ls ID [PATH]
  warren ps [--label k=v]... [--state STATE]
  warren rm ID...   warren pause ID   warren resume ID
  warren images [prepare]            list (or build the default images)
  warren images import FILE --name NAME   a docker save / OCI layout tarball, with a progress bar
  warren images pull REF [--name NAME]    from an OCI registry (host:port/repo:tag)
  warren images rm NAME...
  warren layers [push FILE --name NAME | rm NAME...]   standalone layers for --layer
  warren layers publish --to oci://HOST/REPO [--image NAME] [LAYER...]   copy layers to a registry blob store
  warren commit ID NAME [--exclude PATH]...            the sandbox's changes as a new image
  warren fn run -l python|bash|node FILE|- [--image I] [--timeout MS] [--stdin FILE] [--file PATH=LOCAL]... [--env K=V]...
                                     one stateless call; prints its output, exits with its exit code

Environment: WARREN_URL, WARREN_API_KEY, WARREN_REGISTRY_USER/PASSWORD (images pull, layers publish)
(client); WARREN_DATA_DIR, WARREN_IMAGE_CACHE (server).`;

/** A network policy from --egress, --allow and --deny. */
function networkFlags(v: { egress?: string; allow?: string[]; deny?: string[] }): { egress: 'deny' | 'allow'; allow: string[]; deny: string[] } {
  if (v.egress !== undefined && v.egress !== 'deny' && v.egress !== 'allow') throw new WarrenError('invalid_argument', '--egress is deny or allow');
  return { egress: v.egress ?? 'deny', allow: v.allow ?? [], deny: v.deny ?? [] };
}

/** hosts(5) lines: an address, then names; # comments. */
function positiveInt(v: string, flag: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} takes a whole number of at least 1`);
  return n;
}

function parseHosts(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const [addr, ...names] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!addr) continue;
    for (const n of names) out[n.toLowerCase()] = addr;
  }
  return out;
}

/** Registry credentials from WARREN_REGISTRY_USER and WARREN_REGISTRY_PASSWORD, if set. */
function registryAuth(): { username: string; password: string } | undefined {
  const username = process.env.WARREN_REGISTRY_USER;
  return username ? { username, password: process.env.WARREN_REGISTRY_PASSWORD ?? '' } : undefined;
}

/** IMAGE[:LANGUAGE]=N, the image's own tag included (debian-python:latest:python=4). */
function parseFnPool(spec: string): { image: string; language?: 'python' | 'bash' | 'node'; size: number } {
  const m = /^(.+?)(?::(python|bash|node))?=(\d+)$/.exec(spec);
  if (!m) throw new WarrenError('invalid_argument', `--fn-pool wants IMAGE[:LANGUAGE]=N, got "${spec}"`);
  return { image: m[1]!, language: m[2] as 'python' | 'bash' | 'node' | undefined, size: Number(m[3]) };
}

function kv(list: string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of list ?? []) {
    const i = item.indexOf('=');
    if (i < 1) throw new WarrenError('invalid_argument', `expected KEY=VALUE, got "${item}"`);
    out[item.slice(0, i)] = item.slice(i + 1);
  }
  return out;
}

async function client(): Promise<ReturnType<typeof connect>> {
  let apiKey = process.env.WARREN_API_KEY;
  if (!apiKey) apiKey = (await readFile(`${DEFAULT_DATA_DIR}/admin.key`, 'utf8').catch(() => '')).trim() || undefined;
  return connect({ apiKey });
}

async function sandbox(id: string | undefined): Promise<Sandbox> {
  if (!id) throw new WarrenError('invalid_argument', 'name a sandbox id');
  return (await client()).sandboxes.get(id);
}

async function run(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'up': {
      const { values } = parseArgs({
        args: rest,
        options: {
          port: { type: 'string', default: '7070' },
          host: { type: 'string', default: '127.0.0.1' },
          'data-dir': { type: 'string', default: DEFAULT_DATA_DIR },
          'image-cache': { type: 'string', default: DEFAULT_IMAGE_CACHE },
          'keep-sandboxes': { type: 'boolean', default: false },
          images: { type: 'string' },
          runtime: { type: 'string', default: 'native' },
          'blob-url': { type: 'string' },
          'blob-cache-gib': { type: 'string', default: '20' },
          'no-network': { type: 'boolean', default: false },
          'egress-hosts': { type: 'string' },
          'sandbox-subnet': { type: 'string' },
          'dns-rate': { type: 'string' },
          'zram-swap-mib': { type: 'string' },
          'no-zram-swap': { type: 'boolean', default: false },
          'cpu-overcommit': { type: 'string' },
          'cpu-busy': { type: 'string' },
          'memory-overcommit': { type: 'string' },
          'memory-floor-mib': { type: 'string' },
          'fn-pool': { type: 'string', multiple: true },
          'sandbox-disk-gib': { type: 'string' },
          'no-disk-quotas': { type: 'boolean', default: false },
          'disk-reserve-mib': { type: 'string' },
          'fn-max-workers': { type: 'string' },
          'fn-queue-limit': { type: 'string' },
          'pull-registries': { type: 'string' },
        },
      });
      if (values.runtime !== 'native' && values.runtime !== 'runc') throw new Error('--runtime is native or runc');
      await up({
        port: Number(values.port),
        host: values.host,
        dataDir: values['data-dir'],
        imageCacheDir: values['image-cache'],
        keepSandboxes: values['keep-sandboxes'],
        images: values.images ? (values.images.split(',') as DefaultImageName[]) : undefined,
        adminKey: process.env.WARREN_API_KEY,
        runtime: values.runtime,
        blobStore: values['blob-url']
          ? {
              url: values['blob-url'],
              key: process.env.WARREN_BLOB_KEY,
              username: process.env.WARREN_BLOB_USER,
              password: process.env.WARREN_BLOB_PASSWORD,
              cacheMaxBytes: Number(values['blob-cache-gib']) * 2 ** 30,
            }
          : undefined,
        swap: values['no-zram-swap'] ? false : values['zram-swap-mib'] ? { zramMiB: Number(values['zram-swap-mib']) } : undefined,
        overcommit: {
          cpu: values['cpu-overcommit'] ? Number(values['cpu-overcommit']) : undefined,
          busy: values['cpu-busy'] ? Number(values['cpu-busy']) : undefined,
          memory: values['memory-overcommit'] ? Number(values['memory-overcommit']) : undefined,
        },
        memoryFloorMiB: values['memory-floor-mib'] ? Number(values['memory-floor-mib']) : undefined,
        pullRegistries: values['pull-registries'] ? values['pull-registries'].split(',').filter(Boolean) : undefined,
        dataDiskReserveMiB: values['disk-reserve-mib'] ? positiveInt(values['disk-reserve-mib'], '--disk-reserve-mib') : undefined,
        disk: values['no-disk-quotas'] ? false : { sizeGiB: values['sandbox-disk-gib'] ? Number(values['sandbox-disk-gib']) : undefined },
        fn: {
          pools: (values['fn-pool'] ?? []).map(parseFnPool),
          maxWorkersPerImage: values['fn-max-workers'] ? Number(values['fn-max-workers']) : undefined,
          queueLimit: values['fn-queue-limit'] ? Number(values['fn-queue-limit']) : undefined,
        },
        network: values['no-network']
          ? false
          : {
              hosts: values['egress-hosts'] ? parseHosts(await readFile(values['egress-hosts'], 'utf8')) : undefined,
              subnet: values['sandbox-subnet'],
              dnsQueriesPerSecond: values['dns-rate'] ? positiveInt(values['dns-rate'], '--dns-rate') : undefined,
            },
      });
      return -1; // keeps running
    }
    case 'down': {
      const { values } = parseArgs({ args: rest, options: { 'data-dir': { type: 'string', default: DEFAULT_DATA_DIR } } });
      console.log((await down(values['data-dir'])) ? 'stopped' : 'not running');
      return 0;
    }
    case 'create': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: {
          cpu: { type: 'string' },
          memory: { type: 'string' },
          ttl: { type: 'string' },
          label: { type: 'string', multiple: true },
          env: { type: 'string', multiple: true },
          user: { type: 'string' },
          workdir: { type: 'string' },
          layer: { type: 'string', multiple: true },
          egress: { type: 'string' },
          allow: { type: 'string', multiple: true },
          deny: { type: 'string', multiple: true },
        },
      });
      const image = positionals[0];
      if (!image) throw new WarrenError('invalid_argument', 'name an image');
      const sb = await (
        await client()
      ).sandboxes.create({
        image,
        layers: values.layer,
        resources: { cpu: values.cpu ? Number(values.cpu) : undefined, memoryMiB: values.memory ? Number(values.memory) : undefined },
        lifetime: values.ttl ? { ttlSeconds: Number(values.ttl) } : undefined,
        labels: kv(values.label),
        env: kv(values.env),
        user: values.user,
        workdir: values.workdir,
        network: values.egress || values.allow || values.deny ? networkFlags(values) : undefined,
      });
      console.log(sb.id);
      return 0;
    }
    case 'network': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { egress: { type: 'string' }, allow: { type: 'string', multiple: true }, deny: { type: 'string', multiple: true } },
      });
      const info = await (await sandbox(positionals[0])).setNetwork(networkFlags(values));
      console.log(JSON.stringify(info.network, null, 2));
      return 0;
    }
    case 'exec': {
      const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: { session: { type: 'string' }, timeout: { type: 'string' } } });
      const [id, ...words] = positionals;
      if (!words.length) throw new WarrenError('invalid_argument', 'name a command');
      const sb = await sandbox(id);
      let code = 0;
      const command = words.length === 1 ? (words[0] as string) : words;
      for await (const ev of sb.execStream(command, { session: values.session, timeoutMs: values.timeout ? Number(values.timeout) : undefined })) {
        if (ev.type === 'stdout') process.stdout.write(ev.data);
        else if (ev.type === 'stderr') process.stderr.write(ev.data);
        else if (ev.type === 'exit') code = ev.exitCode ?? 128;
        else if (ev.type === 'error') throw new WarrenError('unavailable', ev.error.message);
      }
      return code;
    }
    case 'shell': {
      const sb = await sandbox(rest[0]);
      const sh = await sb.shell();
      const rl = createInterface({ input: process.stdin, terminal: false });
      if (process.stdin.isTTY) process.stderr.write(`${sb.id}$ `);
      let last = 0;
      for await (const line of rl) {
        if (!line.trim()) continue;
        for await (const ev of sh.execStream(line, { timeoutMs: 3_600_000 })) {
          if (ev.type === 'stdout') process.stdout.write(ev.data);
          else if (ev.type === 'stderr') process.stderr.write(ev.data);
          else if (ev.type === 'exit') last = ev.exitCode ?? 128;
        }
        if (process.stdin.isTTY) process.stderr.write(`${sb.id}$ `);
      }
      await sh.close().catch(() => undefined);
      return last;
    }
    case 'cp': {
      const [src, dst] = rest;
      if (!src || !dst) throw new WarrenError('invalid_argument', 'usage: warren cp SRC DST (one side ID:/path)');
      const remote = (s: string): [string, string] | null => {
        const m = /^(sb_[A-Za-z0-9]+):(\/.*)$/.exec(s);
        return m ? [m[1] as string, m[2] as string] : null;
      };
      const from = remote(src);
      const to = remote(dst);
      if (from && !to) await writeFile(dst, await (await sandbox(from[0])).files.read(from[1]));
      else if (to && !from) await (await sandbox(to[0])).files.write(to[1], await readFile(src));
      else throw new WarrenError('invalid_argument', 'exactly one side of cp is ID:/path');
      return 0;
    }
    case 'ls': {
      const sb = await sandbox(rest[0]);
      for (const e of await sb.files.list(rest[1] ?? '/')) {
        console.log(
          `${e.type.padEnd(7)} ${(e.mode & 0o7777).toString(8).padStart(4, '0')} ${String(e.size).padStart(10)} ${e.name}${e.target ? ` -> ${e.target}` : ''}`,
        );
      }
      return 0;
    }
    case 'ps': {
      const { values } = parseArgs({ args: rest, options: { label: { type: 'string', multiple: true }, state: { type: 'string' } } });
      const w = await client();
      let cursor: string | undefined;
      do {
        const page = await w.sandboxes.list({ labels: kv(values.label), state: values.state as never, cursor });
        for (const s of page.sandboxes) {
          const u = s.info.usage;
          const mem = `${(u.memoryBytes / 2 ** 20).toFixed(1)}M${u.swapBytes ? `+${(u.swapBytes / 2 ** 20).toFixed(0)}M swap` : ''}`;
          console.log(
            `${s.id}  ${s.info.state.padEnd(8)} ${s.info.image.padEnd(24)} cpu ${u.cpuRecent.toFixed(2).padStart(5)} (${u.cpuSeconds.toFixed(1)}s)  mem ${mem.padEnd(16)} idle ${String(u.idleSeconds).padStart(5)}s  ${s.info.createdAt}`,
          );
        }
        cursor = page.nextCursor ?? undefined;
      } while (cursor);
      const [node] = (await w.nodes()).nodes;
      if (node) {
        const mib = (n: number): string => `${(n / 1024).toFixed(1)}G`;
        console.log(
          `node ${node.id}: ${node.sandboxes} sandboxes (${node.paused} paused); cpu requested ${node.allocated.cpu} / committed ${node.committed.cpu} / used ${node.used.cpu.toFixed(2)} of ${node.capacity.cpu}; ` +
            `memory requested ${mib(node.allocated.memoryMiB)} / committed ${mib(node.committed.memoryMiB)} / used ${mib(node.used.memoryMiB)} (+${mib(node.used.swapMiB)} swap) of ${mib(node.capacity.memoryMiB)}`,
        );
      }
      return 0;
    }
    case 'rm':
    case 'pause':
    case 'resume': {
      if (!rest.length) throw new WarrenError('invalid_argument', 'name a sandbox id');
      for (const id of rest) {
        const sb = await sandbox(id);
        await (cmd === 'rm' ? sb.delete() : cmd === 'pause' ? sb.pause() : sb.resume());
      }
      return 0;
    }
    case 'images': {
      if (rest[0] === 'prepare') {
        const { values } = parseArgs({ args: rest.slice(1), options: { 'image-cache': { type: 'string', default: DEFAULT_IMAGE_CACHE } } });
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
        for (const n of rest.slice(1)) await w.deleteImage(n);
        return 0;
      }
      for (const i of await w.images()) console.log(`${i.name.padEnd(28)} ${String(i.sizeBytes).padStart(12)}  ${i.layers.join(',')}`);
      return 0;
    }
    case 'layers': {
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
    case 'commit': {
      const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: { exclude: { type: 'string', multiple: true } } });
      const [id, name] = positionals;
      if (!id || !name) throw new WarrenError('invalid_argument', 'usage: warren commit SANDBOX NAME [--exclude PATH]...');
      const image = await (await sandbox(id)).commit(name, { exclude: values.exclude });
      console.log(`${image.name}  ${image.layers.length} layers  ${fmtBytes(image.sizeBytes)}`);
      return 0;
    }
    case 'fn': {
      const [sub, ...args] = rest;
      if (sub !== 'run') throw new WarrenError('invalid_argument', 'usage: warren fn run -l LANGUAGE FILE|-');
      const { values, positionals } = parseArgs({
        args,
        allowPositionals: true,
        options: {
          language: { type: 'string', short: 'l' },
          image: { type: 'string' },
          timeout: { type: 'string' },
          stdin: { type: 'string' },
          file: { type: 'string', multiple: true },
          env: { type: 'string', multiple: true },
        },
      });
      const lang = values.language;
      if (lang !== 'python' && lang !== 'bash' && lang !== 'node') throw new WarrenError('invalid_argument', '-l is python, bash or node');
      const src = positionals[0];
      if (!src) throw new WarrenError('invalid_argument', 'name the file with the code (- for stdin)');
      const code = src === '-' ? await readStdin() : await readFile(src, 'utf8');
      const files = await Promise.all(
        Object.entries(kv(values.file)).map(async ([path, local]) => ({
          path,
          content: (await readFile(local)).toString('base64'),
          encoding: 'base64' as const,
        })),
      );
      const r = await (
        await client()
      ).fn.run({
        language: lang,
        code,
        image: values.image,
        timeoutMs: values.timeout ? Number(values.timeout) : undefined,
        stdin: values.stdin ? await readFile(values.stdin, 'utf8') : undefined,
        files,
        env: values.env ? kv(values.env) : undefined,
      });
      process.stdout.write(r.stdout);
      process.stderr.write(r.stderr);
      if (r.timedOut) console.error(`warren: the call timed out after ${r.durationMs} ms`);
      if (r.truncated) console.error('warren: the output was cut at its limit (the call was stopped)');
      return r.exitCode ?? 128 + (r.signal === 'SIGKILL' ? 9 : 1);
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE);
      console.log(`\nDefault images: ${Object.keys(DEFAULT_IMAGES).join(', ')}`);
      return 0;
    default:
      console.error(`unknown command "${cmd}"\n\n${USAGE}`);
      return 2;
  }
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function fmtBytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;
}

/** A one-line progress bar on stderr when it is a terminal, plain lines otherwise. */
function progressBar(): ((label: string, fraction: number) => void) & { done(): void } {
  const tty = process.stderr.isTTY;
  let last = '';
  const draw = (label: string, fraction: number): void => {
    const f = Math.max(0, Math.min(1, fraction));
    const width = 30;
    const line = `[${'#'.repeat(Math.round(f * width)).padEnd(width, '.')}] ${label}`;
    if (line === last) return;
    last = line;
    if (tty) process.stderr.write(`\r${line}\x1b[K`);
    else if (f === 1 || !label.startsWith('uploading')) process.stderr.write(line + '\n');
  };
  return Object.assign(draw, { done: () => tty && last && process.stderr.write('\n') });
}

run(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (e: unknown) => {
    if (e instanceof WarrenError) console.error(`warren: ${e.code}: ${e.message}`);
    else console.error(`warren: ${e instanceof Error ? e.message : String(e)}`);
    process.exitCode = 1;
  },
);
