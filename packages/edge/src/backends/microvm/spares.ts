import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { processExited } from '../../host/proc.js';
import { runningQemu, runSpareAhead, startSpare, stopMicrovm } from './vm-process.js';

/** A spare's directory name starts so (a sandbox id never does). */
const PREFIX = '.spare-';
/** The file a spare's directory gets once it runs ahead, ready to be taken (it stays with the sandbox made of it). */
export const SPARE_READY = 'spare-ready';

interface Spare {
  dir: string;
  pid: number;
  /** The tap its QEMU opened (a name of its own until a create binds it: VmTap); null without network. */
  tap: string | null;
  /** Its guest runs the template's state already (see runSpareAhead). */
  running: boolean;
}

/**
 * Spare QEMUs for clones: each started for a template, with its disk copied, running the
 * template's state with one command run (see runSpareAhead: an idle guest, its memory the
 * template's pages but those it wrote), in a `.spare-…` directory under `dir` that a create
 * links its sandbox's to. Starting QEMU, loading the state and translating the guest's first
 * paths are most of a clone's time under TCG; a create that finds a spare skips them. At most `max` wait at once, for the templates used
 * last (each create of a template asks for one more of it; the oldest template's go first).
 */
export class MicrovmSpares {
  /** Ready spares by template directory, in the order their templates were last asked for. */
  private readonly ready = new Map<string, Spare[]>();
  private readonly starting = new Set<string>();
  private closed = false;
  /** What an earlier run of the edge left, stopped before this one starts any. */
  private swept: Promise<void> | null = null;

  constructor(
    private readonly dir: string,
    private readonly max: number,
    /** Whether spares open a tap (the node's microVMs have network links). */
    private readonly taps: boolean,
  ) {}

  /** A ready spare of `template` (its directory and QEMU), taken out of the pool; null if none. */
  async take(template: string): Promise<Spare | null> {
    await (this.swept ??= this.sweep());
    const list = this.ready.get(template) ?? [];
    for (let s = list.shift(); s; s = list.shift()) {
      if (!(await processExited(s.pid))) return s;
      await rm(s.dir, { recursive: true, force: true });
    }
    return null;
  }

  /** Starts one spare of `template` in the background if the pool has room for it (making room from older templates). */
  fill(template: string): void {
    if (this.closed || this.max <= 0 || this.starting.has(template)) return;
    const list = this.ready.get(template) ?? [];
    this.ready.delete(template);
    this.ready.set(template, list);
    if (list.length > 0) return;
    void this.trim(this.max - 1).then(() => this.start(template));
  }

  /** Stops the spares of a template that is gone. */
  async discard(template: string): Promise<void> {
    const list = this.ready.get(template) ?? [];
    this.ready.delete(template);
    for (const s of list) await this.stop(s);
  }

  /** Stops every spare, and removes what an earlier run of the edge left (spares are never adopted). */
  async close(): Promise<void> {
    this.closed = true;
    for (const t of [...this.ready.keys()]) await this.discard(t);
    await this.sweep();
  }

  /**
   * Stops the spares no one holds (left by an earlier run of the edge, or by this one at its
   * close); a spare a sandbox was made of (its directory links to it) is that sandbox's.
   */
  private async sweep(): Promise<void> {
    const entries = await readdir(this.dir, { withFileTypes: true }).catch(() => []);
    const linked = new Set<string>();
    for (const e of entries) if (e.isSymbolicLink()) linked.add(basename(await readlink(join(this.dir, e.name)).catch(() => '')));
    const held = new Set([...this.ready.values()].flatMap((l) => l.map((s) => basename(s.dir))));
    for (const e of entries) {
      if (!e.isDirectory() || !e.name.startsWith(PREFIX) || linked.has(e.name) || held.has(e.name)) continue;
      const dir = join(this.dir, e.name);
      await this.stop({ dir, pid: (await runningQemu(dir)) ?? 0, tap: null, running: false });
    }
  }

  private async start(template: string): Promise<void> {
    if (this.closed || this.starting.has(template)) return;
    this.starting.add(template);
    const dir = join(this.dir, PREFIX + randomBytes(8).toString('hex'));
    try {
      await (this.swept ??= this.sweep());
      await mkdir(dir, { recursive: true, mode: 0o700 });
      // A name no slot's link has (it is renamed to its sandbox's slot when taken).
      const tap = this.taps ? `wv${randomBytes(5).toString('hex')}` : null;
      const pid = await startSpare(dir, template, tap);
      await runSpareAhead(dir, pid, template);
      await writeFile(join(dir, SPARE_READY), '');
      const list = this.ready.get(template);
      if (this.closed || !list) await this.stop({ dir, pid, tap, running: true });
      else list.push({ dir, pid, tap, running: true });
    } catch {
      await rm(dir, { recursive: true, force: true });
    } finally {
      this.starting.delete(template);
    }
  }

  /** Stops spares, oldest templates first, until at most `keep` wait. */
  private async trim(keep: number): Promise<void> {
    let count = [...this.ready.values()].reduce((n, l) => n + l.length, 0);
    for (const list of this.ready.values()) {
      while (count > keep && list.length) {
        await this.stop(list.shift()!);
        count--;
      }
    }
  }

  private async stop(s: Spare): Promise<void> {
    if (s.pid) await stopMicrovm(s.pid);
    await rm(s.dir, { recursive: true, force: true });
  }
}
