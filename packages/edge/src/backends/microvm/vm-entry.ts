import { WarrenError } from '@warren/api';
import { sandboxResolvConf, type TapLink } from '../backend.js';
import type { AgentMux, MuxLink } from './agent-mux.js';
import type { GuestInput } from './input-flow.js';

// What the microVM backend keeps of each of its microVMs, and the files in a microVM's directory
// that outlive its QEMU (read again by an adopt or a restore).

/** What a guest's HELLO says of its link (none without one). */
export function muxLink(link: TapLink | null): MuxLink | null {
  return link && { address: link.address, prefix: link.prefix, gateway: link.gateway, resolvConf: sandboxResolvConf(link.gateway) };
}

/** A microVM's link, in its directory (for an adopt). */
export const LINK_FILE = 'link.json';
/** Present in a batch microVM's directory: each QEMU it gets (a restore's, an adopt's) is made batch too. */
export const BATCH_FILE = 'cpu-class-batch';

/** A microVM of this node: its QEMU (pid 0 while saved) and start time, the way to its init. */
export interface Vm {
  pid: number;
  start: number | null;
  mux: AgentMux;
  /** Saved to disk (it has no QEMU until resumed). */
  saved: boolean;
  /** While its state is being saved: its QEMU ends on purpose then. */
  saving: Promise<void> | null;
  /** While it is being frozen as a fork base: a save waits for it. */
  freezing?: Promise<void> | null;
  /** Its guest's memory (what its sandbox requested). */
  memoryMiB: number;
  /** Its network link, if it has one. */
  link: TapLink | null;
  /** What its display's input learnt of its guest (a full VM's: whether it acknowledges input). */
  input?: GuestInput;
}

/**
 * The bytes of a guest's layer tar, passed on; at the end, fails unless they ended with the tar's
 * end marker (two zero blocks), which the guest writes only when it wrote all of its layer.
 */
export async function* endMarked(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  let tail = Buffer.alloc(0);
  for await (const chunk of source) {
    tail = Buffer.concat([tail, chunk]).subarray(-1024);
    yield chunk;
  }
  if (tail.length < 1024 || tail.some((b) => b !== 0)) throw new WarrenError('unavailable', "the microVM's writable layer could not be read whole");
}
