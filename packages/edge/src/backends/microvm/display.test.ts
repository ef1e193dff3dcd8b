import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import { InputRequest, MAX_INPUT_KEYSTROKES, WarrenError, type InputEvent } from '@warren/api';
import { encodePng, parsePpm } from './screen.js';
import { VmScreens } from './vm-screens.js';
import { inputStrokes, keyCodes, strokeEvents, type InputStroke } from './input-events.js';
import { VM_SCREEN, vmArgs, type MicrovmSpec } from './qemu-args.js';

test('a screen dump (PPM) becomes a PNG with the same pixels, red still red, each row as it is', async () => {
  const rgb = Buffer.from([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 40, 50, 60, 255, 255, 255]);
  const img = parsePpm(Buffer.concat([Buffer.from('P6\n3 2\n255\n'), rgb]));
  assert.deepEqual([img.width, img.height], [3, 2]);
  const png = await encodePng(img);
  assert.equal(png.subarray(1, 4).toString('latin1'), 'PNG');
  // The chunks in order: IHDR (3 x 2, 8-bit truecolour), one IDAT, IEND.
  const ihdr = png.subarray(16, 29);
  assert.deepEqual([ihdr.readUInt32BE(0), ihdr.readUInt32BE(4), ihdr[8], ihdr[9]], [3, 2, 8, 2]);
  const idatAt = 8 + 12 + 13;
  assert.equal(png.toString('latin1', idatAt + 4, idatAt + 8), 'IDAT');
  const rows = inflateSync(png.subarray(idatAt + 8, idatAt + 8 + png.readUInt32BE(idatAt)));
  assert.deepEqual([...rows], [0, ...rgb.subarray(0, 9), 0, ...rgb.subarray(9)]);
  assert.equal(png.subarray(-8, -4).toString('latin1'), 'IEND');
});

test('a large screen is encoded off the event loop: other work runs while its PNG is made', async () => {
  // 512 x 512 of noise (deflate has the most work with it): encoded on the loop, nothing else would run until it is done.
  const img = { width: 512, height: 512, rgb: randomBytes(512 * 512 * 3) };
  let turns = 0;
  let done = false;
  const spin = (): void => {
    if (done) return;
    turns++;
    setImmediate(spin);
  };
  setImmediate(spin);
  const png = await encodePng(img);
  done = true;
  assert.ok(turns > 10, `the event loop turned ${turns} times while the PNG was made`);
  assert.ok(png.length > img.rgb.length, 'noise does not compress');
});

test('a PPM that is not one, or holds fewer pixels than it says, is refused', () => {
  assert.throws(() => parsePpm(Buffer.from('P5\n2 2\n255\n0000')), WarrenError);
  assert.throws(() => parsePpm(Buffer.from('P6\n2 2\n255\n' + 'x'.repeat(11))), /holds 11 bytes/);
  assert.throws(() => parsePpm(Buffer.from('P6\n100000 100000\n255\n')), WarrenError);
  // A screen one pixel wide and millions high: more rows than a VGA shows, each a step of the encoder.
  assert.throws(() => parsePpm(Buffer.concat([Buffer.from('P6\n1 1000000\n255\n'), Buffer.alloc(3_000_000)])), /not a screen dump/);
  assert.throws(() => parsePpm(Buffer.alloc(0)), WarrenError);
});

/** A PPM of a `width` x `height` screen of noise. */
function ppm(width: number, height: number): Buffer {
  return Buffer.concat([Buffer.from(`P6\n${width} ${height}\n255\n`), randomBytes(width * height * 3)]);
}

/** Resolves the next time `wake` is called: a wait on what the code under test signals. */
function signals(): { wake: () => void; next: () => Promise<void> } {
  let wake = (): void => undefined;
  return { wake: () => wake(), next: () => new Promise<void>((r) => (wake = r)) };
}

test("concurrent screen calls of one VM share one dump and its PNG; other VMs' and later calls dump anew", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-screens-'));
  try {
    const dumps: string[] = [];
    const screens = new VmScreens({
      dump: async (id, file) => {
        dumps.push(id);
        await writeFile(file, ppm(320, 200));
      },
    });
    const file = (id: string): string => join(dir, `${id}.ppm`);
    const calls = Array.from({ length: 8 }, () => screens.png('vm-a', file('vm-a')));
    const other = screens.png('vm-b', file('vm-b'));
    const pngs = await Promise.all(calls);
    assert.deepEqual(dumps.sort(), ['vm-a', 'vm-b']);
    assert.ok(pngs.every((p) => p === pngs[0]));
    assert.equal(pngs[0]!.subarray(1, 4).toString('latin1'), 'PNG');
    assert.notEqual(await other, pngs[0]);
    assert.ok(!existsSync(file('vm-a')) && !existsSync(file('vm-b')), 'the dumps are removed');
    // Once it is done, the next call takes the screen as it is then.
    assert.notEqual(await screens.png('vm-a', file('vm-a')), pngs[0]);
    assert.equal(dumps.length, 3);
    // A failed capture is shared too, and not kept: the next call dumps again.
    const failing = new VmScreens({ dump: () => Promise.reject(new WarrenError('unavailable', "QEMU's QMP socket does not answer")) });
    const errors = await Promise.allSettled([failing.png('vm-c', file('vm-c')), failing.png('vm-c', file('vm-c'))]);
    assert.ok(errors.every((e) => e.status === 'rejected' && e.reason === (errors[0] as PromiseRejectedResult).reason));
    await assert.rejects(failing.png('vm-c', file('vm-c')), /does not answer/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a node encodes two screens at once: other VMs' captures wait their turn, then each gets its own", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-screens-'));
  try {
    const s = signals();
    let dumped = 0;
    let active = 0;
    let most = 0;
    const entered: string[] = [];
    const release = new Map<string, () => void>();
    const screens = new VmScreens({
      dump: async (id, file) => {
        await writeFile(file, id);
        dumped++;
        s.wake();
      },
      encode: async (dump) => {
        const id = dump.toString();
        active++;
        most = Math.max(most, active);
        entered.push(id);
        await new Promise<void>((r) => {
          release.set(id, r);
          s.wake();
        });
        active--;
        return Buffer.from(`png of ${id}`);
      },
    });
    const ids = ['vm-a', 'vm-b', 'vm-c', 'vm-d'];
    const calls = ids.map((id) => screens.png(id, join(dir, `${id}.ppm`)));
    while (dumped < ids.length || release.size < 2) await s.next();
    // Every VM has dumped; what it does next runs before this turn of the loop ends.
    await new Promise((r) => setImmediate(r));
    assert.equal(entered.length, 2, `encoding at once: ${entered.join(', ')}`);
    const first = entered[0]!;
    release.get(first)!();
    while (entered.length < 3) await s.next();
    assert.equal(most, 2);
    // The rest go as turns free up.
    while (entered.length < ids.length) {
      for (const r of release.values()) r();
      await s.next();
    }
    for (const r of release.values()) r();
    assert.deepEqual(
      (await Promise.all(calls)).map(String),
      ids.map((id) => `png of ${id}`),
    );
    assert.equal(most, 2);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('keys: names, characters and chords become key codes, modifiers first', () => {
  assert.deepEqual(keyCodes('Return'), ['ret']);
  assert.deepEqual(keyCodes('BackSpace'), ['backspace']);
  assert.deepEqual(keyCodes('ctrl+c'), ['ctrl', 'c']);
  assert.deepEqual(keyCodes('ctrl+shift+T'), ['ctrl', 'shift', 'shift', 't']);
  assert.deepEqual(keyCodes('+'), ['shift', 'equal']);
  assert.deepEqual(keyCodes('F5'), ['f5']);
  assert.throws(
    () => keyCodes('Hyper_Q'),
    (e: WarrenError) => e.code === 'invalid_argument',
  );
});

test('input strokes: one key change a batch, a keystroke or mouse event a stroke, text on a US layout, the pointer scaled to the tablet', () => {
  const strokes = (events: InputEvent[]): InputStroke[] => [...inputStrokes(events, VM_SCREEN)];
  const codes = (ss: InputStroke[]): string[] =>
    ss.flatMap((s) =>
      s.batches.map((b) => {
        const e = b[0] as { type: string; data: { down: boolean; key?: { data: string }; button?: string } };
        return `${e.data.down ? '+' : '-'}${e.data.key?.data ?? e.data.button}`;
      }),
    );
  const text = strokes([{ type: 'text', text: 'a!' }]);
  assert.deepEqual(codes(text), ['+a', '-a', '+shift', '+1', '-1', '-shift']);
  assert.deepEqual(
    text.map((s) => [s.device, s.batches.length, strokeEvents(s)]),
    [
      ['keyboard', 2, 4],
      ['keyboard', 4, 8],
    ],
    'each change and its sync are events in the guest',
  );
  assert.deepEqual(codes(strokes([{ type: 'key', key: 'ctrl+c' }])), ['+ctrl', '+c', '-c', '-ctrl']);
  const [mouse] = strokes([{ type: 'mouse', x: 1023, y: 0, button: 'left' }]);
  assert.equal(mouse?.device, 'tablet');
  assert.deepEqual(mouse.batches[0], [
    { type: 'abs', data: { axis: 'x', value: 0x7fff } },
    { type: 'abs', data: { axis: 'y', value: 0 } },
  ]);
  assert.deepEqual(codes([{ device: 'tablet', batches: mouse.batches.slice(1) }]), ['+left', '-left']);
  assert.equal(strokeEvents(mouse), 7);
  assert.deepEqual(codes(strokes([{ type: 'mouse', button: 'right', action: 'down' }])), ['+right']);
  assert.deepEqual(strokes([{ type: 'mouse' }]), [], 'a mouse event with nothing in it sends nothing');
  assert.throws(
    () =>
      inputStrokes(
        [
          { type: 'text', text: 'abc' },
          { type: 'text', text: 'é' },
        ],
        VM_SCREEN,
      ),
    (e: WarrenError) => e.code === 'invalid_argument',
    'an event it cannot send is refused before any stroke is made',
  );
  assert.throws(() => inputStrokes([{ type: 'mouse', x: 1024, y: 5 }], VM_SCREEN), /off the 1024x768 screen/);
  assert.throws(() => inputStrokes([{ type: 'key', key: 'a+b+c+d+e+f+g+h+i' }], VM_SCREEN), /a chord holds 8 keys at most/);
});

test('input strokes are made as they are sent: twenty times the largest request the schema takes holds one stroke at a time', () => {
  // 20 x 10,000 shifted letters: 200,000 strokes, 800,000 batches; twenty times the request cap (MAX_INPUT_KEYSTROKES).
  const events = Array.from({ length: 20 }, () => ({ type: 'text' as const, text: 'A'.repeat(10_000) }));
  const before = process.memoryUsage().heapUsed;
  let n = 0;
  let peak = 0;
  for (const s of inputStrokes(events, VM_SCREEN)) {
    n += s.batches.length;
    if (n % 40_000 === 0) peak = Math.max(peak, process.memoryUsage().heapUsed - before);
  }
  assert.equal(n, 20 * 10_000 * 4, 'shift down, the key down, up, shift up: four batches a character');
  // Held all at once they are ~150 MiB (the audit's W3-06: 735 MiB for 4,000,000 batches); one at a time, garbage.
  assert.ok(peak < 48 * 2 ** 20, `the heap grew ${Math.round(peak / 2 ** 20)} MiB while they were made`);
  // The first stroke comes at once, before the rest exist.
  const first = inputStrokes(events, VM_SCREEN).next();
  assert.deepEqual(first.done ? null : first.value.batches[0], [{ type: 'key', data: { down: true, key: { type: 'qcode', data: 'shift' } } }]);
});

test('an input request types 10,000 keystrokes at most (text characters and keys together): past it, invalid_argument with why', () => {
  const text = (n: number) => ({ type: 'text' as const, text: 'a'.repeat(n) });
  assert.equal(InputRequest.safeParse({ events: [text(10_000)] }).success, true);
  assert.equal(InputRequest.safeParse({ events: [text(9_999), { type: 'key', key: 'Return' }, { type: 'mouse', x: 1, y: 1, button: 'left' }] }).success, true);
  for (const events of [[text(10_000), { type: 'key', key: 'Return' }], Array.from({ length: 1000 }, () => text(10_000))]) {
    const r = InputRequest.safeParse({ events });
    assert.equal(r.success, false);
    assert.match(r.error?.issues[0]?.message ?? '', /one request types 10000 at most/);
  }
  assert.equal(MAX_INPUT_KEYSTROKES, 10_000);
});

test("vmArgs: q35 with a VGA display, virtio on PCI, a keyboard and a tablet, the image's own init", () => {
  const spec: MicrovmSpec = {
    kind: 'vm',
    kernel: '/k/vmlinuz',
    initrd: '/k/initrd',
    cpus: 2,
    memoryMiB: 1024,
    layers: [{ meta: '/l/a.erofs', data: '/l/a.data' }],
    rwDisk: '/vm/rw.ext4',
    agentSocket: '/vm/agent.sock',
    qmpSocket: '/vm/qmp.sock',
    consoleSocket: '/vm/console.sock',
    pidFile: '/vm/qemu.pid',
    accel: 'tcg',
    tap: 'wn0001',
    ram: { file: '/t/ram', shared: true },
  };
  const args = vmArgs(spec).join(' ');
  assert.match(args, /-M q35,memory-backend=pc\.ram /);
  assert.match(args, /memory-backend-file,id=pc\.ram,size=1024M,mem-path=\/t\/ram,share=on/);
  assert.match(args, /-device VGA /);
  assert.match(args, /virtio-blk-pci,drive=l0,serial=warren-l0/);
  assert.match(args, /virtio-blk-pci,drive=d0,serial=warren-d0/);
  assert.match(args, /virtio-net-pci,netdev=net0/);
  assert.match(args, /virtio-serial-pci/);
  assert.match(args, /virtio-keyboard-pci,id=warren-kbd .*virtio-tablet-pci,id=warren-tablet/);
  assert.match(args, / vga=0x344 net\.ifnames=0 warren\.systemd warren\.layers=d( |$)/);
  assert.doesNotMatch(args, /virtio-\w+-device/);
  assert.throws(() => vmArgs({ ...spec, tap: 'a,b' }), /tap name/);
});
