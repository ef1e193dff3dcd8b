import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { WarrenError } from '@warren/api';
import type { FsOps } from '@warren/images';

interface Pending {
  resolve: (extra: string) => void;
  reject: (e: Error) => void;
  what: string;
}

/** The mount syscalls the edge needs, behind an interface so tests can see what is mounted. */
export interface Mounts {
  overlay(lower: string[], upper: string, work: string, target: string): Promise<void>;
  /** A read-only EROFS mount of a file, with its file data in `data` when split. */
  erofs(file: string, target: string, data?: string | null): Promise<void>;
  /** A tmpfs (nosuid, nodev, noexec) with the given mount options. */
  tmpfs(target: string, options: string): Promise<void>;
  umount(target: string): Promise<void>;
  /**
   * A clone of the mount at source, idmapped (ids `from`.. on disk seen as `to`.., `size` of
   * them), nodev and nosuid, mounted at target.
   */
  idmap(source: string, target: string, map: { from: number; to: number; size: number }): Promise<void>;
  /** A read-only sysfs of a network namespace (a path) mounted at target, on the host. */
  sysfs(netns: string, target: string): Promise<void>;
  /**
   * A btrfs subvolume `name` in `dir` whose space the file system limits to `kib` (a qgroup); with
   * `layerOwner`, a sandbox's writable layer in it too: `upper` owned by that id, and `work`.
   */
  subvolume(dir: string, name: string, kib: number, layerOwner?: number): Promise<void>;
  /** Deletes a subvolume and all in it; a missing one is no error. */
  deleteSubvolume(dir: string, name: string): Promise<void>;
  close(): Promise<void>;
}

/** Starting host programs (runc) without forking the Node process. */
export interface Spawner {
  /**
   * Runs a program to its exit with stdin/stdout on /dev/null and stderr appended to `logFile`;
   * with `listenSocket`, a Unix socket listening at that path is its fd 3. Resolves the exit
   * status (128+signal when killed). `signal` kills it (the status is then 137).
   */
  run(file: string, args: string[], opts: { logFile: string; listenSocket?: string; signal?: AbortSignal }): Promise<number>;
}

/** Hearing that a process ended without looking at it again and again (a pidfd in warren-hostd). */
export interface ExitWatcher {
  /**
   * Calls `onExit` once when the process `pid` that started at `startTime` (clock ticks after
   * boot, /proc/PID/stat) ends, at once if it has or the pid is another's by now. Rejects when
   * it cannot be watched (out of file descriptors): the caller then looks for itself.
   */
  watchExit(pid: number, startTime: number, onExit: () => void): Promise<void>;
  /** Forgets an `onExit` whose caller stopped waiting (the process is still watched for the others). */
  unwatchExit?(pid: number, startTime: number, onExit: () => void): void;
}

/** Starting sandbox inits without a container runtime process (native/spawn.c). */
export interface SandboxSpawner {
  /**
   * Sends a `spawn` request (fields from spawnFields); resolves the init's host pid once it has
   * exec'd, and its start time as the spawner read it (null: it did not, or the init is gone).
   */
  spawnSandbox(fields: string[]): Promise<{ pid: number; startTime: number | null }>;
}

function checkField(v: string): string {
  if (/[\t\n\0]/.test(v)) throw new WarrenError('internal', 'a host helper argument contains a tab, newline or NUL');
  return v;
}

/**
 * The edge's side of `warren-hostd`, a small long-lived helper that calls mount(2) directly (no
 * mount binary parsing a mount table that grows with every sandbox) and starts runc (Node forks
 * its whole process for every spawn: milliseconds of blocked event loop each).
 */
export class HostHelper implements Mounts, Spawner, SandboxSpawner, ExitWatcher, FsOps {
  private child!: ChildProcessWithoutNullStreams;
  /** Watched processes ("PID STARTTIME") and who to tell; asked again of a new helper after a restart. */
  private readonly watches = new Map<string, { told: Array<() => void>; asked: Promise<void> }>();
  private pending = new Map<string, Pending>();
  private nextTag = 1;
  private dead: Error | null = null;
  private closing = false;
  private startedAt = 0;

  /**
   * `onRestart`: the helper died and a new one took its place (what the old one held, such as
   * network namespaces, went with it).
   */
  constructor(
    private readonly binary: string,
    private readonly onRestart?: (why: Error) => void,
  ) {
    this.start();
  }

  private start(): void {
    // Its own process group: a Ctrl-C at the terminal must not kill it before the edge has used
    // it to unmount everything. It exits when our end of its stdin closes, crash or not.
    const child = spawn(this.binary, [], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    this.child = child;
    this.dead = null;
    this.startedAt = Date.now();
    const pending = new Map<string, Pending>();
    this.pending = pending;
    child.on('error', (e) => this.die(child, pending, e));
    child.on('exit', (code, sig) => this.die(child, pending, new Error(`warren-hostd exited (${sig ?? code})`)));
    child.stdin.on('error', () => undefined);
    child.stderr.resume();
    createInterface({ input: child.stdout }).on('line', (line) => {
      const [tag = '', status, a, b] = line.split('\t');
      if (tag === '*' && status === 'exit') return this.exitSeen(`${a} ${b}`);
      const p = pending.get(tag);
      if (!p) return;
      pending.delete(tag);
      if (status === 'ok') p.resolve(a ?? '');
      else p.reject(new WarrenError('internal', `${p.what} failed: ${b ?? line}`, { errno: Number(a) }));
    });
  }

  private send(what: string, fields: string[]): Promise<string> {
    return this.sendTagged(what, fields).reply;
  }

  /** A request and the tag that names it (a `kill` names a `run` by it). */
  private sendTagged(what: string, fields: string[]): { tag: string; reply: Promise<string> } {
    const tag = String(this.nextTag++);
    if (this.dead) return { tag, reply: Promise.reject(this.dead) };
    const line = [tag, ...fields.map(checkField)].join('\t') + '\n';
    const reply = new Promise<string>((resolve, reject) => {
      this.pending.set(tag, { resolve, reject, what });
      this.child.stdin.write(line);
    });
    return { tag, reply };
  }

  async overlay(lower: string[], upper: string, work: string, target: string): Promise<void> {
    await this.send('overlay mount', ['overlay', lower.join(':'), upper, work, target]);
  }

  async idmap(source: string, target: string, map: { from: number; to: number; size: number }): Promise<void> {
    await this.send('idmapped mount', ['idmap', source, target, `${map.from}:${map.to}:${map.size}`]);
  }

  async erofs(file: string, target: string, data?: string | null): Promise<void> {
    await this.send('erofs mount', ['erofs', file, target, ...(data ? [data] : [])]);
  }

  async mknod(path: string, type: 'char' | 'block' | 'fifo', mode: number, major: number, minor: number): Promise<void> {
    const t = type === 'char' ? 'c' : type === 'block' ? 'b' : 'p';
    await this.send('mknod', ['mknod', Buffer.from(path).toString('hex'), t, mode.toString(8), String(major), String(minor)]);
  }

  async setxattr(path: string, name: string, value: Buffer): Promise<void> {
    await this.send('setting an extended attribute', ['xattr', Buffer.from(path).toString('hex'), name, value.toString('hex')]);
  }

  async tmpfs(target: string, options: string): Promise<void> {
    await this.send('tmpfs mount', ['tmpfs', target, options]);
  }

  async umount(target: string): Promise<void> {
    await this.send('umount', ['umount', target]);
  }

  async subvolume(dir: string, name: string, kib: number, layerOwner?: number): Promise<void> {
    const owner = layerOwner === undefined ? [] : [String(layerOwner)];
    await this.send('making a subvolume', ['subvol', Buffer.from(dir).toString('hex'), name, String(Math.ceil(kib)), ...owner]);
  }

  async deleteSubvolume(dir: string, name: string): Promise<void> {
    await this.send('deleting a subvolume', ['subvol-delete', Buffer.from(dir).toString('hex'), name]);
  }

  async run(file: string, args: string[], opts: { logFile: string; listenSocket?: string; signal?: AbortSignal }): Promise<number> {
    const sent = this.sendTagged(file, ['run', opts.logFile, opts.listenSocket ?? '-', file, ...args]);
    const { signal } = opts;
    const kill = (): void => void this.send('kill', ['kill', sent.tag]).catch(() => undefined);
    if (signal?.aborted) kill();
    else signal?.addEventListener('abort', kill, { once: true });
    try {
      return Number(await sent.reply);
    } finally {
      signal?.removeEventListener('abort', kill);
    }
  }

  /** The helper's pid: a namespace it holds is /proc/PID/fd/FD to other programs. */
  get pid(): number {
    return this.child.pid ?? 0;
  }

  /** A new network namespace (loopback up, sandbox sysctls) that the helper holds open; its fd. */
  async netns(): Promise<number> {
    return Number(await this.send('making a network namespace', ['netns']));
  }

  /** In namespace `fd` (held here) eth0 with `sandboxIp`/31, up, default route via `hostIp`; on the host its peer `hostIf` with `hostIp`/31, up. */
  async veth(fd: number, hostIf: string, hostIp: string, sandboxIp: string): Promise<void> {
    await this.send('linking a sandbox network', ['veth', String(fd), hostIf, hostIp, sandboxIp]);
  }

  async netnsClose(fd: number): Promise<void> {
    await this.send('closing a network namespace', ['netns-close', String(fd)]);
  }

  /** A read-only sysfs of a network namespace (a path) mounted at target, on the host. */
  async sysfs(netns: string, target: string): Promise<void> {
    await this.send('sysfs mount', ['sysfs', netns, target]);
  }

  async spawnSandbox(fields: string[]): Promise<{ pid: number; startTime: number | null }> {
    const [pid = '', start = '0'] = (await this.send('starting the sandbox', ['spawn', ...fields])).split(' ');
    return { pid: Number(pid), startTime: Number(start) || null };
  }

  watchExit(pid: number, startTime: number, onExit: () => void): Promise<void> {
    const key = `${pid} ${startTime}`;
    const known = this.watches.get(key);
    // A second caller is watched only as far as the first one's request is taken.
    if (known) {
      known.told.push(onExit);
      return known.asked;
    }
    const w = { told: [onExit], asked: Promise.resolve() };
    w.asked = this.send('watching a process', ['watch', String(pid), String(startTime)]).then(
      () => undefined,
      (e: unknown) => {
        if (this.watches.get(key) === w) this.watches.delete(key);
        throw e;
      },
    );
    this.watches.set(key, w);
    return w.asked;
  }

  unwatchExit(pid: number, startTime: number, onExit: () => void): void {
    const told = this.watches.get(`${pid} ${startTime}`)?.told;
    const at = told?.indexOf(onExit) ?? -1;
    if (at >= 0) told!.splice(at, 1);
  }

  private exitSeen(key: string): void {
    const w = this.watches.get(key);
    this.watches.delete(key);
    for (const f of w?.told ?? []) f();
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.dead) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.stdin.end();
    await exited;
  }

  /**
   * The helper died: what it was asked and had not answered fails (it may or may not have been
   * done), and a new helper takes its place at once (after a second when it died young, so a
   * helper that cannot run does not spin).
   */
  private die(child: ChildProcessWithoutNullStreams, pending: Map<string, Pending>, e: Error): void {
    if (child !== this.child || this.dead) return;
    const err = new WarrenError('unavailable', 'the host helper stopped', {}, { cause: e });
    this.dead = err;
    for (const p of pending.values()) p.reject(err);
    pending.clear();
    if (this.closing) return;
    const restart = (): void => {
      if (this.closing) return;
      this.start();
      // The watches went with the old helper: the new one is asked for them again (one that
      // ended meanwhile is reported at once). One it cannot take is no longer watched.
      for (const key of this.watches.keys()) {
        const [pid = '', start = ''] = key.split(' ');
        this.send('watching a process', ['watch', pid, start]).catch(() => this.watches.delete(key));
      }
      this.onRestart?.(e);
    };
    if (Date.now() - this.startedAt < 1000) setTimeout(restart, 1000).unref();
    else restart();
  }
}
