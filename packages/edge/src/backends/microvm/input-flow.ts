import { setTimeout as sleep } from 'node:timers/promises';
import { WarrenError } from '@warren/api';
import { strokeEvents, type InputStroke, type QmpInputBatch } from './input-events.js';

/** What sendStrokes needs of a QMP connection (qmp.ts's Qmp). */
export interface QmpCalls {
  execute(command: string, args?: Record<string, unknown>): Promise<unknown>;
}

/** The QOM paths of a full VM's virtio keyboard's and tablet's devices (their ids are vmArgs'). */
export const INPUT_DEVICE_PATHS: Record<InputStroke['device'], string> = {
  keyboard: '/machine/peripheral/warren-kbd/virtio-backend',
  tablet: '/machine/peripheral/warren-tablet/virtio-backend',
};

/**
 * The most events sent to a guest that it has not yet acknowledged (see sendStrokes). What a
 * guest's input stack has not read waits in the kernel's buffer of each reader (evdev's holds 64
 * events for a keyboard); one that overflows is emptied whole (SYN_DROPPED in Xorg's log, and
 * the keys are gone). This plus an acknowledgement's own events stays under it.
 */
export const MAX_UNACKED_EVENTS = 40;

const numLock = (down: boolean): QmpInputBatch => [{ type: 'key', data: { down, key: { type: 'qcode', data: 'num_lock' } } }];
/** Num Lock pressed and released twice: its state as it was, and two changes of the keyboard's light. */
const ACK_STROKE: InputStroke = { device: 'keyboard', batches: [numLock(true), numLock(false), numLock(true), numLock(false)] };

/** What sendStrokes learns of a VM's guest, kept for its next input (the backend keeps one per VM). */
export interface GuestInput {
  /** Whether its guest acknowledges input (turns its keyboard's light on and off); unknown until its first input. */
  acks?: boolean;
  /** The light's count of changes when it was found not to (a later change says it was only slow). */
  darkAt?: number;
}

/** How sendStrokes waits for a guest. */
export interface FlowOptions {
  /** How long a guest may take to read or acknowledge what it was sent before the input fails (unavailable). */
  stallMs?: number;
  /** How often a guest's queue or light is looked at again while it is waited for. */
  pollMs?: number;
}

/**
 * The buffers the guest's driver has given a virtio input device's event queue and the device has
 * not filled yet: the events it can take now. QEMU reads the ring's indices from guest memory
 * (`x-query-virtio-queue-element`, QEMU 7.2 on); null where it cannot say (an older QEMU, a
 * device of another name, a driver that has not set its queue up: QEMU then routes the events to
 * the PS/2 devices).
 */
async function room(q: QmpCalls, path: string): Promise<number | null> {
  try {
    const e = (await q.execute('x-query-virtio-queue-element', { path, queue: 0 })) as { avail?: { idx?: number }; used?: { idx?: number } };
    if (typeof e.avail?.idx !== 'number' || typeof e.used?.idx !== 'number') return null;
    return (e.avail.idx - e.used.idx) & 0xffff;
  } catch {
    return null;
  }
}

/** How many status messages (a light turned on or off) the guest's keyboard driver has sent: its status queue's used index; null where QEMU cannot say. */
async function lightChanges(q: QmpCalls): Promise<number | null> {
  try {
    const s = (await q.execute('x-query-virtio-queue-status', { path: INPUT_DEVICE_PATHS.keyboard, queue: 1 })) as { 'used-idx'?: number };
    return typeof s['used-idx'] === 'number' ? s['used-idx'] : null;
  } catch {
    return null;
  }
}

/**
 * Sends strokes to a VM's virtio keyboard and tablet, in order, so that the guest loses none.
 * QMP's input-send-event answers before the guest has read anything, and events are lost at two
 * places when the guest falls behind (a busy node, a clone faulting its memory in, its X server
 * busy drawing): QEMU drops every event of a sync that finds the device's queue in the guest
 * short (64 buffers; silently, a trace only), and the guest's kernel empties a reader's buffer
 * that overflows (see MAX_UNACKED_EVENTS). So each stroke goes only once its device's queue has
 * room for all of it, and at most MAX_UNACKED_EVENTS go before the guest acknowledges them: Num
 * Lock is pressed twice, and the guest's input stack (X, a console), once it has handled every
 * key before it, turns the keyboard's light on and off, which its driver tells QEMU (the status
 * queue). One comes too where the strokes change device (keys after a click are handled after
 * it, where it put the focus), and one at the end: the input has been handled when this returns.
 * A guest that does not acknowledge within `stallMs` gets its input without (`guest` remembers
 * it, until its light changes after all); one that reads nothing for `stallMs`, or stops
 * acknowledging, fails the input (unavailable).
 */
export async function sendStrokes(q: QmpCalls, strokes: Iterable<InputStroke>, guest: GuestInput = {}, o: FlowOptions = {}): Promise<void> {
  const flow = new Flow(q, guest, o.stallMs ?? 30_000, o.pollMs ?? 5);
  if (guest.acks === false && guest.darkAt !== undefined) {
    const now = await lightChanges(q);
    if (now !== null && now !== guest.darkAt) guest.acks = true;
  }
  let last: InputStroke['device'] | null = null;
  for (const s of strokes) {
    if (flow.unacked > 0 && (flow.unacked + strokeEvents(s) > MAX_UNACKED_EVENTS || s.device !== last)) await flow.ack();
    await flow.send(s);
    last = s.device;
  }
  if (last) await flow.ack();
}

/** One input's sending: what is known of each device's queue, and what the guest has not acknowledged. */
class Flow {
  /** Events each device's queue is known to take now; null: its room cannot be known (sent as they come). */
  private readonly room = new Map<InputStroke['device'], number | null>();
  /** Events sent since the guest last acknowledged. */
  unacked = 0;

  constructor(
    private readonly q: QmpCalls,
    private readonly guest: GuestInput,
    private readonly stallMs: number,
    private readonly pollMs: number,
  ) {}

  /** Sends a stroke once its device's queue has room for all of its events. */
  async send(s: InputStroke): Promise<void> {
    const need = strokeEvents(s);
    let have = this.room.get(s.device);
    if (have === undefined || (have !== null && have < need)) {
      const since = Date.now();
      while ((have = await room(this.q, INPUT_DEVICE_PATHS[s.device])) !== null && have < need) {
        if (Date.now() - since > this.stallMs)
          throw new WarrenError('unavailable', `the VM's guest read none of its ${s.device}'s input for ${this.stallMs / 1000} s`, { device: s.device });
        await sleep(this.pollMs);
      }
    }
    for (const b of s.batches) await this.q.execute('input-send-event', { events: b });
    this.room.set(s.device, have === null ? null : have - need);
    this.unacked += need;
  }

  /** Sends ACK_STROKE and waits for the light's two changes (unless this guest does not acknowledge). */
  async ack(): Promise<void> {
    const before = this.guest.acks === false ? null : await lightChanges(this.q);
    if (before === null) {
      this.guest.acks = false;
      return;
    }
    await this.send(ACK_STROKE);
    const since = Date.now();
    let now: number | null;
    while ((now = await lightChanges(this.q)) === null || ((now - before) & 0xffff) < 2) {
      if (Date.now() - since > this.stallMs) {
        if (this.guest.acks) throw new WarrenError('unavailable', `the VM's guest handled none of its input for ${this.stallMs / 1000} s`);
        Object.assign(this.guest, { acks: false, darkAt: now ?? before });
        return;
      }
      await sleep(this.pollMs);
    }
    this.guest.acks = true;
    this.unacked = 0;
  }
}
