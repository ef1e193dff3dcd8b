import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpioNewc } from './cpio.js';
import { createServer, type Socket } from 'node:net';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentMux, MUX, MUX_HEADER, MUX_LINK, MUX_MAX_PAYLOAD, MUX_SEED, MUX_WINDOW, MuxDecoder, muxFrame, muxHello } from './agent-mux.js';
import { GUEST_MAC, TCG_CODE_MIB, microvmArgs, withoutPit } from './qemu-args.js';
import { initramfsEntries } from './guest-kit.js';
import { stopMicrovm } from './vm-process.js';
import { endMarked } from './vm-entry.js';

/** Reads a newc archive back: name, mode and data of each entry. */
function readCpio(buf: Buffer): Array<{ name: string; mode: number; data: string }> {
  const out: Array<{ name: string; mode: number; data: string }> = [];
  let off = 0;
  for (;;) {
    assert.equal(buf.toString('ascii', off, off + 6), '070701');
    const field = (i: number): number => parseInt(buf.toString('ascii', off + 6 + i * 8, off + 14 + i * 8), 16);
    const mode = field(1);
    const size = field(6);
    const nameSize = field(11);
    const name = buf.toString('utf8', off + 110, off + 110 + nameSize - 1);
    let p = off + 110 + nameSize;
    p += (4 - (p % 4)) % 4;
    const data = buf.toString('utf8', p, p + size);
    p += size + ((4 - (size % 4)) % 4);
    if (name === 'TRAILER!!!') return out;
    out.push({ name, mode, data });
    off = p;
  }
}

test('cpioNewc writes the kernel’s newc format: entries, modes and data read back, 4-byte aligned', () => {
  const a = cpioNewc([
    { path: 'modules', dir: true },
    { path: 'modules/order', data: Buffer.from('a.ko\n') },
    { path: 'init', data: Buffer.from('#!x'), mode: 0o755 },
  ]);
  assert.equal(a.length % 4, 0);
  assert.deepEqual(readCpio(a), [
    { name: 'modules', mode: 0o040755, data: '' },
    { name: 'modules/order', mode: 0o100644, data: 'a.ko\n' },
    { name: 'init', mode: 0o100755, data: '#!x' },
  ]);
  assert.deepEqual(cpioNewc([{ path: 'x', data: Buffer.from('1') }]), cpioNewc([{ path: 'x', data: Buffer.from('1') }]));
  assert.throws(() => cpioNewc([{ path: '/abs', data: Buffer.alloc(0) }]), /bad path/);
  assert.throws(() => cpioNewc([{ path: 'a/../b', data: Buffer.alloc(0) }]), /bad path/);
});

test('the initramfs: the stage as /init, the modules in order, the platform files under platform/', () => {
  const names = readCpio(
    cpioNewc(
      initramfsEntries({
        stage: Buffer.from('S'),
        platform: [
          { name: 'bash', data: Buffer.from('B') },
          { name: 'warren-init', data: Buffer.from('I') },
        ],
        modules: [
          { name: 'virtio.ko', data: Buffer.from('v') },
          { name: 'erofs.ko', data: Buffer.from('e') },
        ],
      }),
    ),
  );
  assert.deepEqual(
    names.map((n) => [n.name, n.data]),
    [
      ['init', 'S'],
      ['modules', ''],
      ['modules/virtio.ko', 'v'],
      ['modules/erofs.ko', 'e'],
      ['modules/order', 'virtio.ko\nerofs.ko\n'],
      ['platform', ''],
      ['platform/bash', 'B'],
      ['platform/warren-init', 'I'],
    ],
  );
});

test('microvmArgs: each layer a read-only disk by serial, the kinds on the command line, no defaults, bad paths refused', () => {
  const spec = {
    kernel: '/k/vmlinuz',
    initrd: '/k/initrd',
    cpus: 0.5,
    memoryMiB: 256,
    layers: [
      { meta: '/l/a.erofs', data: '/l/a.data' },
      { meta: '/l/b.erofs', data: null },
    ],
    rwDisk: '/vm/rw.ext4',
    agentSocket: '/vm/agent.sock',
    qmpSocket: '/vm/qmp.sock',
    consoleSocket: '/vm/console.sock',
    pidFile: '/vm/qemu.pid',
    accel: 'tcg' as const,
    tscKhz: 2096013.4,
  };
  const args = microvmArgs(spec);
  const after = (flag: string): string[] => args.flatMap((a, i) => (a === flag ? [args[i + 1]!] : []));
  assert.deepEqual(after('-smp'), ['1']);
  assert.deepEqual(after('-m'), ['256M']);
  assert.match(after('-append')[0]!, /warren\.layers=dm(\s|$)/);
  assert.match(after('-append')[0]!, / tsc_early_khz=2096013 /);
  assert.doesNotMatch(microvmArgs({ ...spec, accel: 'kvm' }).join(' '), /tsc_early_khz/);
  // Under TCG the TSC is not left to a watchdog of lost ticks (a busy host would turn it off for good).
  assert.match(after('-append')[0]!, / tsc=reliable /);
  assert.match(microvmArgs({ ...spec, tscKhz: null }).join(' '), / panic=-1 init_on_free=1 tsc=reliable warren\.layers=/);
  // A guest zeroes what it frees: what it gives back when asked (AgentMux.reclaim) swaps for nothing.
  assert.match(microvmArgs({ ...spec, accel: 'kvm' }).join(' '), / init_on_free=1 /);
  assert.doesNotMatch(microvmArgs({ ...spec, accel: 'kvm' }).join(' '), /tsc=reliable/);
  // Told the TSC's rate, a TCG guest needs no PIT (whose timer woke QEMU every 27 ms); without the rate it calibrates against one.
  assert.equal(withoutPit('tcg', 2096013.4), true);
  assert.equal(withoutPit('tcg', null), false);
  assert.equal(withoutPit('kvm', 2096013.4), false);
  assert.match(microvmArgs({ ...spec, noPit: true }).join(' '), / microvm,x-option-roms=off,rtc=on,pit=off /);
  // A spec saved before (no noPit): the machine keeps its PIT, as the state it saved needs.
  assert.doesNotMatch(after('-M')[0]!, /pit=off/);
  // TCG's translated code is capped: a guest cannot grow its QEMU by a GiB of it.
  assert.deepEqual(after('-accel'), [`tcg,tb-size=${TCG_CODE_MIB}`]);
  const kvm = microvmArgs({ ...spec, accel: 'kvm' });
  assert.equal(kvm[kvm.indexOf('-accel') + 1], 'kvm');
  assert.doesNotMatch(after('-append')[0]!, /idshift/);
  assert.match(microvmArgs({ ...spec, idShift: { base: 100000, size: 65536 } }).join(' '), / warren\.idshift=100000:65536( |$)/);
  assert.deepEqual(
    after('-device').filter((d) => d.startsWith('virtio-blk')),
    [
      'virtio-blk-device,drive=l0,serial=warren-l0',
      'virtio-blk-device,drive=d0,serial=warren-d0',
      'virtio-blk-device,drive=l1,serial=warren-l1',
      'virtio-blk-device,drive=rw,serial=warren-rw',
    ],
  );
  assert.equal(after('-drive').filter((d) => d.includes('readonly=on')).length, 3);
  assert.ok(args.includes('-nodefaults'));
  assert.ok(!args.some((a) => a.includes('netdev') || a.startsWith('file:')));
  // One NIC always (a template's and its clones' devices match), on a tap only when given one.
  assert.deepEqual(
    after('-device').filter((d) => d.startsWith('virtio-net')),
    [`virtio-net-device,mac=${GUEST_MAC}`],
  );
  const linked = microvmArgs({ ...spec, tap: 'wnab12c3' });
  assert.equal(linked[linked.indexOf('-netdev') + 1], 'tap,id=net0,ifname=wnab12c3,script=no,downscript=no');
  assert.ok(linked.includes(`virtio-net-device,netdev=net0,mac=${GUEST_MAC}`));
  assert.throws(() => microvmArgs({ ...spec, tap: 'a,script=/x' }), /tap name/);
  assert.throws(() => microvmArgs({ ...spec, tap: 'x'.repeat(16) }), /tap name/);
  assert.throws(() => microvmArgs({ ...spec, rwDisk: '/vm/a,b' }), /commas/);
  // RAM: anonymous by default; a template writes its file, a clone maps it copy-on-write, under the machine's own RAM id.
  assert.ok(!args.includes('-object'));
  const tmpl = microvmArgs({ ...spec, ram: { file: '/t/ram', shared: true } });
  const clone = microvmArgs({ ...spec, ram: { file: '/t/ram', shared: false } });
  assert.equal(tmpl[tmpl.indexOf('-object') + 1], 'memory-backend-file,id=microvm.ram,size=256M,mem-path=/t/ram,share=on');
  assert.equal(clone[clone.indexOf('-object') + 1], 'memory-backend-file,id=microvm.ram,size=256M,mem-path=/t/ram,share=off');
  assert.match(clone[clone.indexOf('-M') + 1]!, /,memory-backend=microvm\.ram$/);
  assert.throws(() => microvmArgs({ ...spec, ram: { file: '/t/r am', shared: false } }), /spaces/);
});

test('muxHello: the clock in ns, the seed, the link, the hostname; a wrong seed, a long name or a bad link refused', () => {
  const seed = Buffer.alloc(MUX_SEED, 7);
  const h = muxHello(1_700_000_000_123_456_789n, seed, 'sb-abc');
  assert.equal(h.readBigUInt64BE(0), 1_700_000_000_123_456_789n);
  assert.deepEqual(h.subarray(8, 8 + MUX_SEED), seed);
  assert.deepEqual(h.subarray(8 + MUX_SEED, 8 + MUX_SEED + MUX_LINK + 2), Buffer.alloc(MUX_LINK + 2), 'no link, no resolv.conf: zeros');
  assert.equal(h.subarray(8 + MUX_SEED + MUX_LINK + 2).toString(), 'sb-abc');
  const conf = Buffer.from('nameserver 10.200.0.2\n');
  const l = muxHello(0n, seed, 'sb-abc', { address: '10.200.0.3', prefix: 31, gateway: '10.200.0.2', resolvConf: conf });
  assert.deepEqual([...l.subarray(8 + MUX_SEED, 8 + MUX_SEED + MUX_LINK)], [10, 200, 0, 3, 31, 10, 200, 0, 2]);
  assert.equal(l.readUInt16BE(8 + MUX_SEED + MUX_LINK), conf.length);
  assert.equal(l.subarray(8 + MUX_SEED + MUX_LINK + 2).toString(), 'nameserver 10.200.0.2\nsb-abc');
  assert.throws(() => muxHello(0n, Buffer.alloc(8), 'x'), /seed/);
  assert.throws(() => muxHello(0n, seed, 'x'.repeat(65)), /too long/);
  const ok = { address: '10.0.0.3', prefix: 31, gateway: '10.0.0.2', resolvConf: Buffer.alloc(0) };
  assert.throws(() => muxHello(0n, seed, 'x', { ...ok, address: '10.0.0.300' }), /IPv4/);
  assert.throws(() => muxHello(0n, seed, 'x', { ...ok, prefix: 33 }), /prefix/);
  assert.throws(() => muxHello(0n, seed, 'x', { ...ok, resolvConf: Buffer.alloc(4097) }), /resolv/);
});

test('AgentMux: every connection to the guest starts with a HELLO (stream 0), a new one for a new connection', async () => {
  const g = await fakeGuest(() => undefined);
  let n = 0;
  const mux = new AgentMux(g.path, () => muxHello(BigInt(++n), Buffer.alloc(MUX_SEED), `h${n}`));
  try {
    (await mux.connect()).destroy();
    mux.close();
    (await mux.connect()).destroy();
    await new Promise((r) => setTimeout(r, 50));
    const hellos = g.got.filter((f) => f.type === MUX.HELLO);
    assert.deepEqual(
      hellos.map((f) => [f.id, f.payload.subarray(8 + MUX_SEED + MUX_LINK + 2).toString()]),
      [
        [0, 'h1'],
        [0, 'h2'],
      ],
    );
    // Before each connection's first OPEN.
    assert.equal(g.got[0]!.type, MUX.HELLO);
    assert.ok(g.got.findIndex((f) => f.type === MUX.OPEN) > 0);
  } finally {
    mux.close();
    await g.close();
  }
});

test('MuxDecoder: frames split across chunks and several in one; an oversized length is refused', () => {
  const d = new MuxDecoder();
  const a = muxFrame(MUX.DATA, 7, Buffer.from('hello'));
  const b = muxFrame(MUX.EOF, 7);
  const all = Buffer.concat([a, b]);
  assert.deepEqual(d.push(all.subarray(0, 4)), []);
  assert.deepEqual(d.push(all.subarray(4, MUX_HEADER + 2)), []);
  const got = d.push(all.subarray(MUX_HEADER + 2));
  assert.deepEqual(
    got.map((f) => [f.type, f.id, f.payload.toString()]),
    [
      [MUX.DATA, 7, 'hello'],
      [MUX.EOF, 7, ''],
    ],
  );
  const bad = Buffer.alloc(MUX_HEADER);
  bad[0] = MUX.DATA;
  bad.writeUInt32BE(1 << 20, 5);
  assert.throws(() => new MuxDecoder().push(bad), /frame of 1048576 bytes/);
});

/** A stand-in guest on a Unix socket: the frames it got, and a way to send its own. */
async function fakeGuest(
  onFrame: (f: { type: number; id: number; payload: Buffer }, send: (b: Buffer) => void) => void,
): Promise<{ path: string; got: Array<{ type: number; id: number; payload: Buffer }>; close: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-mux-'));
  const path = join(dir, 'agent.sock');
  const got: Array<{ type: number; id: number; payload: Buffer }> = [];
  const sockets: Socket[] = [];
  const server = createServer((sock) => {
    sockets.push(sock);
    const d = new MuxDecoder();
    sock.on('data', (c: Buffer) => {
      for (const f of d.push(c)) {
        got.push({ ...f, payload: Buffer.from(f.payload) });
        onFrame(f, (b) => sock.write(b));
      }
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  return {
    path,
    got,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

test('AgentMux: a guest sends within the credit it is granted, and gets it back as the host reads', async () => {
  const total = MUX_WINDOW * 3;
  let sent = 0;
  let credit = MUX_WINDOW;
  let id = 0;
  const pump = (send: (b: Buffer) => void): void => {
    while (credit > 0 && sent < total) {
      const n = Math.min(credit, MUX_MAX_PAYLOAD, total - sent);
      send(muxFrame(MUX.DATA, id, Buffer.alloc(n, 97)));
      credit -= n;
      sent += n;
    }
    if (sent === total) send(muxFrame(MUX.EOF, id));
  };
  const g = await fakeGuest((f, send) => {
    if (f.type === MUX.OPEN) {
      id = f.id;
      pump(send);
    } else if (f.type === MUX.CREDIT) {
      credit += f.payload.readUInt32BE(0);
      pump(send);
    }
  });
  const mux = new AgentMux(g.path, () => muxHello(0n, Buffer.alloc(MUX_SEED), 'sandbox'));
  try {
    const s = await mux.connect();
    let n = 0;
    for await (const chunk of s) n += (chunk as Buffer).length;
    assert.equal(n, total);
    // The host gave the guest back what it read: past the first window, in CREDIT frames.
    const granted = g.got.filter((f) => f.type === MUX.CREDIT).reduce((a, f) => a + f.payload.readUInt32BE(0), 0);
    assert.ok(granted >= total - MUX_WINDOW, `granted ${granted}`);
  } finally {
    mux.close();
    await g.close();
  }
});

test('AgentMux: a guest that sends past its credit has that connection ended (CLOSE), not buffered without bound', async () => {
  const g = await fakeGuest((f, send) => {
    if (f.type !== MUX.OPEN) return;
    for (let sent = 0; sent <= MUX_WINDOW; sent += MUX_MAX_PAYLOAD) send(muxFrame(MUX.DATA, f.id, Buffer.alloc(MUX_MAX_PAYLOAD)));
  });
  const mux = new AgentMux(g.path, () => muxHello(0n, Buffer.alloc(MUX_SEED), 'sandbox'));
  try {
    const s = await mux.connect();
    s.pause(); // nobody reads: the host grants nothing more
    const err = await Promise.race([
      new Promise<Error>((resolve) => s.once('error', resolve)),
      new Promise<Error>((r) => setTimeout(() => r(new Error('no error in 5 s')), 5000)),
    ]);
    assert.match(err.message, /more than it was allowed/);
    await new Promise((r) => setTimeout(r, 50));
    assert.ok(g.got.some((f) => f.type === MUX.CLOSE));
  } finally {
    mux.close();
    await g.close();
  }
});

test('stopMicrovm: a QEMU that has exited but is not yet reaped (a zombie of the host’s init) counts as gone at once', async () => {
  // `sleep 0` exits at once; its parent, exec'd into `sleep 10`, never reaps it.
  const parent = spawn('sh', ['-c', 'sleep 0 & echo $!; exec sleep 10'], { stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const zombie = Number((await new Promise<Buffer>((r) => parent.stdout.once('data', r))).toString().trim());
    for (let i = 0; i < 100 && !(await readFile(`/proc/${zombie}/stat`, 'utf8')).includes(') Z '); i++) await new Promise((r) => setTimeout(r, 10));
    const t0 = performance.now();
    await stopMicrovm(zombie);
    assert.ok(performance.now() - t0 < 1000, `took ${(performance.now() - t0).toFixed(0)} ms`);
  } finally {
    parent.kill('SIGKILL');
  }
});

test('a guest’s layer tar passes only with its end marker: one cut short (no marker, or data after it) fails', async () => {
  const read = async (chunks: Buffer[]): Promise<number> => {
    let n = 0;
    for await (const c of endMarked(
      (async function* () {
        yield* chunks;
      })(),
    ))
      n += c.length;
    return n;
  };
  const entry = Buffer.alloc(1024, 7);
  assert.equal(await read([entry, Buffer.alloc(600), Buffer.alloc(424)]), 2048, 'the marker split over chunks');
  await assert.rejects(read([entry]), /could not be read whole/);
  await assert.rejects(read([entry, Buffer.alloc(1023)]), /could not be read whole/);
  await assert.rejects(read([Buffer.alloc(1024), Buffer.from('x')]), /could not be read whole/);
  await assert.rejects(read([]), /could not be read whole/);
});
