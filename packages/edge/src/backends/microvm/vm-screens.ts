import { readFile, rm, stat } from 'node:fs/promises';
import { WarrenError } from '@warren/api';
import { Semaphore } from '../../util/semaphore.js';
import { MAX_PPM_BYTES, encodePng, parsePpm } from './screen.js';

/**
 * How many screens a node reads and encodes at once. Each PNG's deflate holds one of libuv's four
 * threads (up to a second for a VGA's largest mode), and those threads serve every file system
 * call and dns.lookup of the edge: two leave the others free.
 */
export const SCREEN_ENCODES = 2;

/** What VmScreens needs of a node. */
export interface VmScreensOptions {
  /** Has VM `id`'s QEMU dump its screen as a PPM into `file` (QMP `screendump`). */
  dump: (id: string, file: string) => Promise<void>;
  /** Screens read and encoded at once on the node (default SCREEN_ENCODES). */
  encodes?: number;
  /** A PPM's bytes as a PNG (default: parsePpm, then encodePng). */
  encode?: (ppm: Buffer) => Promise<Buffer>;
}

/**
 * The screens of a node's VMs as PNGs. Calls for a VM while a capture of it is under way get that
 * capture (one dump, one encode, one file in its directory), and at most `encodes` dumps are read
 * and encoded at once on the node, the others waiting their turn on disk (a dump is up to
 * MAX_PPM_BYTES): a guest in its largest VGA mode and a few parallel GET /screen would otherwise
 * fill libuv's thread pool and stall the edge's every fs call and DNS lookup.
 */
export class VmScreens {
  private readonly inFlight = new Map<string, Promise<Buffer>>();
  private readonly turns: Semaphore;
  private readonly encode: (ppm: Buffer) => Promise<Buffer>;

  constructor(private readonly o: VmScreensOptions) {
    this.turns = new Semaphore(o.encodes ?? SCREEN_ENCODES);
    this.encode = o.encode ?? ((ppm) => encodePng(parsePpm(ppm)));
  }

  /** VM `id`'s screen now, dumped into `file` (removed after); shared with a capture of it under way. */
  png(id: string, file: string): Promise<Buffer> {
    const running = this.inFlight.get(id);
    if (running) return running;
    const capture = this.capture(id, file).finally(() => this.inFlight.delete(id));
    this.inFlight.set(id, capture);
    return capture;
  }

  private async capture(id: string, file: string): Promise<Buffer> {
    try {
      await this.o.dump(id, file);
      return await this.turns.run(async () => {
        // Bounded before it is read: the guest chooses its mode.
        const size = (await stat(file)).size;
        if (size > MAX_PPM_BYTES) throw new WarrenError('internal', `the VM's screen dump is ${size} bytes`);
        return this.encode(await readFile(file));
      });
    } finally {
      await rm(file, { force: true });
    }
  }
}
