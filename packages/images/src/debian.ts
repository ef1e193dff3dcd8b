import { appendFile, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { runFile } from './exec-file.js';

export interface DebianImageOptions {
  suite?: string;
  packages?: string[];
  /** Debian mirror; read from the host's apt sources when absent. */
  mirror?: string;
  signal?: AbortSignal;
}

/** Finds the Debian mirror this host's apt uses (deb822 `URIs:` or one-line `deb` entries). */
export async function hostDebianMirror(): Promise<string | undefined> {
  const files: string[] = ['/etc/apt/sources.list'];
  try {
    for (const f of await readdir('/etc/apt/sources.list.d')) if (/\.(sources|list)$/.test(f)) files.push(join('/etc/apt/sources.list.d', f));
  } catch {
    /* no sources.list.d */
  }
  for (const f of files) {
    const text = await readFile(f, 'utf8').catch(() => '');
    for (const line of text.split('\n')) {
      const m = /^URIs:\s*(\S+\/debian)\/?\s*$/.exec(line) ?? /^deb\s+(?:\[[^\]]*\]\s+)?(\S+\/debian)\/?\s+\S+/.exec(line);
      if (m?.[1]) return m[1];
    }
  }
  return undefined;
}

/** Builds a Debian minbase root filesystem with debootstrap into `dir` and adds the `agent` and `user` users. */
export async function buildDebianRootfs(dir: string, opts: DebianImageOptions = {}): Promise<void> {
  const suite = opts.suite ?? 'bookworm';
  const packages = opts.packages ?? ['python3', 'bash', 'git', 'coreutils', 'ca-certificates'];
  const mirror = opts.mirror ?? (await hostDebianMirror());
  const args = ['--variant=minbase', `--include=${packages.join(',')}`, suite, dir];
  if (mirror) args.push(mirror);
  await runFile('debootstrap', args, { signal: opts.signal });
  // `agent` for Warren's own examples; `user`, whose home E2B's SDKs and examples take as given.
  await appendFile(join(dir, 'etc/passwd'), 'agent:x:1000:1000:agent:/home/agent:/bin/bash\nuser:x:1001:1001:user:/home/user:/bin/bash\n');
  await appendFile(join(dir, 'etc/group'), 'agent:x:1000:\nuser:x:1001:\n');
  for (const [name, id] of [
    ['agent', 1000],
    ['user', 1001],
  ] as const) {
    await mkdir(join(dir, 'home', name), { recursive: true });
    await runFile('chown', [`${id}:${id}`, join(dir, 'home', name)]);
  }
  await mkdir(join(dir, 'workspace'), { recursive: true });
  await writeFile(join(dir, 'etc/hostname'), 'sandbox\n');
  // Package caches are dead weight in a read-only layer.
  await runFile('rm', ['-rf', join(dir, 'var/cache/apt/archives'), join(dir, 'var/lib/apt/lists')]);
  await mkdir(join(dir, 'var/cache/apt/archives/partial'), { recursive: true });
  await mkdir(join(dir, 'var/lib/apt/lists/partial'), { recursive: true });
}
