import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { WarrenError } from '@warren/api';

interface Pending {
  resolve: () => void;
  reject: (e: Error) => void;
  what: string;
}

/** The mount syscalls the edge needs, behind an interface so tests can see what is mounted. */
export interface Mounts {
  overlay(lower: string[], upper: string, work: string, target: string): Promise<void>;
  erofs(file: string, target: string): Promise<void>;
  umount(target: string): Promise<void>;
  close(): Promise<void>;
}

function checkField(v: string): string {
  if (/[\t\n\0]/.test(v)) throw new WarrenError('internal', 'mount path contains a tab, newline or NUL');
  return v;
}

/**
 * Mounts through `warren-mountd`, a small long-lived helper that calls mount(2) directly: no
 * fork per mount and no parsing of a mount table that grows with every sandbox.
 */
export class MountHelper implements Mounts {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly pending: Pending[] = [];
  private dead: Error | null = null;

  constructor(binary: string) {
    // Its own process group: a Ctrl-C at the terminal must not kill it before the edge has used
    // it to unmount everything. It exits when our end of its stdin closes, crash or not.
    this.child = spawn(binary, [], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    this.child.on('error', (e) => this.die(e));
    this.child.on('exit', (code, sig) => this.die(new Error(`warren-mountd exited (${sig ?? code})`)));
    this.child.stderr.resume();
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      const p = this.pending.shift();
      if (!p) return;
      if (line === 'ok') p.resolve();
      else {
        const [, errno, msg] = line.split('\t');
        p.reject(new WarrenError('internal', `${p.what} failed: ${msg ?? line}`, { errno: Number(errno) }));
      }
    });
  }

  private send(what: string, fields: string[]): Promise<void> {
    if (this.dead) return Promise.reject(this.dead);
    const line = fields.map(checkField).join('\t') + '\n';
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject, what });
      this.child.stdin.write(line);
    });
  }

  overlay(lower: string[], upper: string, work: string, target: string): Promise<void> {
    return this.send('overlay mount', ['overlay', lower.join(':'), upper, work, target]);
  }

  erofs(file: string, target: string): Promise<void> {
    return this.send('erofs mount', ['erofs', file, target]);
  }

  umount(target: string): Promise<void> {
    return this.send('umount', ['umount', target]);
  }

  async close(): Promise<void> {
    if (this.dead) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.stdin.end();
    await exited;
  }

  private die(e: Error): void {
    if (this.dead) return;
    this.dead = new WarrenError('unavailable', 'the mount helper stopped', {}, { cause: e });
    for (const p of this.pending.splice(0)) p.reject(this.dead);
  }
}
