import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { inputStrokes, type InputStroke } from './input-events.js';
import { INPUT_DEVICE_PATHS, sendStrokes, type GuestInput, type QmpCalls } from './input-flow.js';
import { VM_SCREEN } from './qemu-args.js';

type Event = { type: string; data: { down?: boolean; key?: { data: string }; button?: string } };

/**
 * QEMU's virtio keyboard and tablet as hw/input/virtio-input.c has them, and a guest behind them
 * that falls behind. Each device has the 64 buffers the guest's driver gives its event queue; a
 * batch and its sync take one an event, and one that finds too few is dropped whole. The driver
 * runs once every `driverEvery` QMP calls and moves what the queue holds into its reader's buffer
 * (evdev's: 64 events; one that overflows is emptied), which the X server handles once every
 * `xEvery` calls: a Num Lock press it handles turns the keyboard's light on or off, which the
 * driver reports on the status queue (unless `lights` is off). It handles its readers one device
 * after the other, the keyboard's first: what came on both between its runs it may handle out of
 * the order it was sent in (a real one reads each device's buffer apart too).
 */
class FakeGuest implements QmpCalls {
  /** What the X server handled, in order. */
  readonly handled: string[] = [];
  /** Events lost: dropped by QEMU or emptied out of a reader's buffer. */
  lost = 0;
  numLock = false;
  private calls = 0;
  private lightChanges = 0;
  // Per device: ring indices (16 bits, started near the wrap), what its queue holds for the driver, its reader's buffer.
  private readonly devices = new Map(
    Object.values(INPUT_DEVICE_PATHS).map((p) => [p, { avail: 65_500 + 64, used: 65_500, queue: [] as Event[][], reader: [] as Event[] }]),
  );

  constructor(private readonly o: { driverEvery: number; xEvery: number; serves?: boolean; lights?: boolean }) {}

  /** The guest runs once more, driver and X server both (it goes on after the last QMP call). */
  settle(): void {
    this.run(true, true);
  }

  private run(driver: boolean, x: boolean): void {
    if (driver)
      for (const d of this.devices.values()) {
        for (const batch of d.queue.splice(0)) {
          if (d.reader.length + batch.length + 1 > 64) {
            this.lost += d.reader.length + batch.length;
            d.reader = [];
          } else d.reader.push(...batch, { type: 'syn', data: {} });
        }
        d.avail = d.used + 64;
      }
    if (x)
      for (const d of this.devices.values())
        for (const e of d.reader.splice(0)) {
          if (e.type === 'syn') continue;
          const name = e.data.key?.data ?? e.data.button ?? e.type;
          if (name === 'num_lock') {
            if (e.data.down) {
              this.numLock = !this.numLock;
              if (this.o.lights !== false) this.lightChanges++;
            }
          } else this.handled.push(`${e.data.down === false ? '-' : '+'}${name}`);
        }
  }

  async execute(command: string, args?: Record<string, unknown>): Promise<unknown> {
    await Promise.resolve();
    this.calls++;
    this.run(this.calls % this.o.driverEvery === 0, this.calls % this.o.xEvery === 0);
    if (command.startsWith('x-query-virtio') && this.o.serves === false) throw new Error(`CommandNotFound: The command ${command} has not been found`);
    if (command === 'x-query-virtio-queue-element') {
      const d = this.devices.get(args?.path as string)!;
      return { avail: { idx: d.avail & 0xffff }, used: { idx: d.used & 0xffff }, index: 0, descs: [] };
    }
    if (command === 'x-query-virtio-queue-status') return { 'used-idx': (65_530 + this.lightChanges) & 0xffff, 'queue-index': args?.queue };
    assert.equal(command, 'input-send-event');
    const events = args?.events as Event[];
    const d = this.devices.get(INPUT_DEVICE_PATHS[events[0]!.type === 'key' ? 'keyboard' : 'tablet'])!;
    if (d.avail - d.used < events.length + 1) this.lost += events.length;
    else {
      d.used += events.length + 1;
      d.queue.push(events);
    }
    return {};
  }
}

const typing = (): InputStroke[] => [
  ...inputStrokes(
    [
      { type: 'mouse', x: 300, y: 200, button: 'left' },
      { type: 'text', text: 'echo typed-$((6*7)) > /tmp/typed'.repeat(4) },
      { type: 'key', key: 'Return' },
    ],
    VM_SCREEN,
  ),
];

/** What the X server should handle of strokes: every key and button change, in order. */
const wanted = (strokes: InputStroke[]): string[] =>
  strokes.flatMap((s) =>
    s.batches.flatMap((b) => (b as Event[]).map((e) => `${e.data.down === false ? '-' : '+'}${e.data.key?.data ?? e.data.button ?? e.type}`)),
  );

test('sent as fast as QMP answers, keys are lost when the guest falls behind: QEMU drops what finds its queue full, the guest what overflows its reader', async () => {
  const guest = new FakeGuest({ driverEvery: 20, xEvery: 50 });
  for (const s of typing()) for (const b of s.batches) await guest.execute('input-send-event', { events: b });
  assert.ok(guest.lost > 0, 'the unpaced sender (before) loses events');
});

test('strokes go as the guest takes them and acknowledges them: every event is handled, in order, by the time the input is done', async () => {
  const strokes = typing();
  const guest = new FakeGuest({ driverEvery: 20, xEvery: 50 });
  const state: GuestInput = {};
  await sendStrokes(guest, strokes, state, { pollMs: 1 });
  assert.equal(guest.lost, 0);
  assert.deepEqual(guest.handled, wanted(strokes), 'all handled when sendStrokes returns');
  assert.equal(state.acks, true);
  assert.equal(guest.numLock, false, 'Num Lock as it was');
});

test('a guest that never acknowledges gets its input all the same, and is not waited for again; one that reads nothing fails it (unavailable); a QEMU that cannot say gets the events as they come', async () => {
  const dark = new FakeGuest({ driverEvery: 1, xEvery: 1, lights: false });
  const state: GuestInput = {};
  await sendStrokes(dark, typing(), state, { stallMs: 30, pollMs: 1 });
  assert.equal(state.acks, false);
  const t0 = Date.now();
  await sendStrokes(dark, typing(), state, { stallMs: 5_000, pollMs: 1 });
  assert.ok(Date.now() - t0 < 2_000, 'no acknowledgement is waited for');
  dark.settle();
  assert.equal(dark.lost, 0);
  assert.deepEqual(dark.handled, [...wanted(typing()), ...wanted(typing())]);

  // One only slow: it is found not to acknowledge, then its light changes after all, and its next input waits for it again.
  const slow = new FakeGuest({ driverEvery: 1, xEvery: Number.MAX_SAFE_INTEGER });
  const slowState: GuestInput = {};
  await sendStrokes(slow, inputStrokes([{ type: 'text', text: 'ab' }], VM_SCREEN), slowState, { stallMs: 30, pollMs: 1 });
  assert.equal(slowState.acks, false);
  slow.settle();
  await sendStrokes(slow, [], slowState);
  assert.equal(slowState.acks, true);

  const stuck = new FakeGuest({ driverEvery: Number.MAX_SAFE_INTEGER, xEvery: Number.MAX_SAFE_INTEGER });
  await assert.rejects(sendStrokes(stuck, typing(), { acks: true }, { stallMs: 30, pollMs: 1 }), (e: WarrenError) => {
    assert.equal(e.code, 'unavailable');
    assert.match(e.message, /handled none of its input for 0\.03 s|read none of its keyboard's input for 0\.03 s/);
    return true;
  });
  assert.equal(stuck.lost, 0, 'nothing is sent into a full queue');

  const old = new FakeGuest({ driverEvery: 1, xEvery: 1, serves: false });
  await sendStrokes(old, typing(), {});
  old.settle();
  assert.equal(old.lost, 0);
  assert.deepEqual(old.handled, wanted(typing()));
});
