import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { ExecEvent, Sandbox } from '@warren/sdk';
import { WarrenError } from '@warren/sdk';
import { makeTar } from './tar-writer.js';
import { errorCode, hostLeftovers, http, startTestWarren, testClock, until, type TestClock, type TestWarren } from './harness.js';

// The contract of each layer a call crosses on its way to a sandbox, over each of its variants:
// the EdgeApi in-process and over its network transport (the edge protocol on a Unix socket),
// and the control plane's state in SQLite and in PostgreSQL. The rest of the integration suite
// runs once, on the first; this file is what runs on all three, so every family of EdgeApi call
// (and the store writes behind each) has a case here: sandboxes, commands and their streams,
// stdin, signals, sessions, terminals, files and archives, pause and resume, lifetimes and the
// event stream, commit, errors.
const LAYERS = [
  { name: 'in-process edge, SQLite', edgeTransport: 'in-process', store: 'sqlite' },
  { name: 'edge over its network transport, SQLite', edgeTransport: 'http', store: 'sqlite' },
  { name: 'in-process edge, PostgreSQL', edgeTransport: 'in-process', store: 'postgres' },
] as const;

const code = (c: string) => (e: unknown) => e instanceof WarrenError && e.code === c;

async function collect(it: AsyncIterable<ExecEvent>): Promise<ExecEvent[]> {
  const out: ExecEvent[] = [];
  for await (const ev of it) out.push(ev);
  return out;
}

for (const layer of LAYERS) {
  describe(`the layers' contract: ${layer.name}`, () => {
    let t: TestWarren;
    let clock: TestClock;
    let sb: Sandbox;
    before(async () => {
      clock = testClock();
      t = await startTestWarren({ clock, edgeTransport: layer.edgeTransport, store: layer.store });
      sb = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { contract: 'yes' }, env: { FROM: 'create' }, workdir: '/work' });
    });
    after(async () => {
      await sb?.delete().catch(() => undefined);
      await t?.close();
    });

    test('create, get and list by label; the node counts it', async () => {
      assert.equal((await t.client.sandboxes.get(sb.id)).id, sb.id);
      const listed = await t.client.sandboxes.list({ labels: { contract: 'yes' } });
      assert.deepEqual(
        listed.sandboxes.map((s) => s.id),
        [sb.id],
      );
      const node = (await t.client.nodes()).nodes[0];
      assert.ok(node && node.sandboxes >= 1, JSON.stringify(node));
      const many = await t.client.sandboxes.createMany(3, { image: 'busybox:latest', labels: { contract: 'many' } });
      assert.equal(many.sandboxes.length, 3);
      assert.deepEqual(many.errors, []);
      assert.equal(await t.client.sandboxes.batch('delete', { contract: 'many' }), 3);
    });

    test('commands: buffered, streamed (start with its pid, output, exit), followed from an offset, deduplicated by requestId', async () => {
      const r = await sb.exec('echo out; echo err >&2; pwd; echo $FROM; exit 3');
      assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['out\n/work\ncreate\n', 'err\n', 3]);
      const events = await collect(sb.execStream('echo one; echo two >&2'));
      const start = events[0];
      assert.ok(start?.type === 'start' && (start.pid ?? 0) > 0, JSON.stringify(start));
      const last = events[events.length - 1];
      assert.ok(last?.type === 'exit' && last.exitCode === 0, JSON.stringify(last));
      assert.deepEqual(
        events.filter((e) => e.type === 'stdout' || e.type === 'stderr').map((e) => (e.type === 'stdout' || e.type === 'stderr' ? e.data : '')),
        ['one\n', 'two\n'],
      );
      // A second follow of the same command from byte 4 of its output.
      const followed = await collect(sb.attach(start.commandId, 4));
      assert.deepEqual(
        followed.filter((e) => e.type === 'stderr').map((e) => (e.type === 'stderr' ? e.data : '')),
        ['two\n'],
      );
      const [a, b] = await Promise.all([0, 1].map(() => sb.exec('echo x >> /tmp/once; cat /tmp/once', { requestId: `once-${layer.store}` })));
      assert.equal(a?.stdout, 'x\n');
      assert.equal(b?.stdout, 'x\n');
    });

    test('stdin in pieces and its end, a signal, a timeout', async () => {
      const stream = sb.execStream('cat; echo done', { keepStdinOpen: true });
      const first = await stream.next();
      assert.ok(!first.done && first.value.type === 'start');
      const id = first.value.commandId;
      await sb.writeStdin(id, 'piece one\n');
      await sb.writeStdin(id, Buffer.from('piece two\n'), true);
      const rest: ExecEvent[] = [];
      for await (const ev of stream) rest.push(ev);
      assert.equal(rest.map((e) => (e.type === 'stdout' ? e.data : '')).join(''), 'piece one\npiece two\ndone\n');
      const sleeper = sb.execStream('sleep 100');
      const s = await sleeper.next();
      assert.ok(!s.done && s.value.type === 'start');
      await sb.kill(s.value.commandId, 'SIGTERM');
      const ended = await collect(sleeper);
      const exit = ended[ended.length - 1];
      assert.ok(exit?.type === 'exit' && exit.signal === 'SIGTERM', JSON.stringify(exit));
      const timed = await sb.exec('sleep 100', { timeoutMs: 200 });
      assert.equal(timed.timedOut, true);
    });

    test('a session keeps its directory and variables; its delete ends it', async () => {
      const sh = await sb.shell({ cwd: '/tmp' });
      await sh.exec('export KEPT=abc && cd /');
      assert.equal((await sh.exec('pwd; echo $KEPT')).stdout, '/\nabc\n');
      await sh.close();
      await assert.rejects(sh.exec('true'), code('not_found'));
    });

    test('a terminal: a command with pty is listed with its pid, resized, and sees its size; once ended, listed with its exit', async () => {
      const stream = sb.execStream('stty size; read line; stty size', { pty: { cols: 80, rows: 24 }, keepStdinOpen: true });
      const first = await stream.next();
      assert.ok(!first.done && first.value.type === 'start');
      const id = first.value.commandId;
      const listed = (await sb.commands()).find((c) => c.commandId === id);
      assert.ok(listed && listed.pty && listed.pid > 0, JSON.stringify(listed));
      // Resized once the first size is shown, then the second is read after the line.
      let out = '';
      for await (const ev of stream) {
        if (ev.type !== 'stdout') continue;
        const before = out;
        out += ev.data;
        if (!before.includes('24 80') && out.includes('24 80')) {
          await sb.resize(id, 100, 30);
          await sb.writeStdin(id, '\n');
        }
      }
      assert.match(out, /24 80[\s\S]*30 100/);
      // Once it ended, it is listed only on asking for finished ones too, with its exit.
      assert.equal(
        (await sb.commands()).find((c) => c.commandId === id),
        undefined,
      );
      const ended = (await sb.commands({ finished: true })).find((c) => c.commandId === id);
      assert.ok(ended && ended.exitCode === 0 && ended.finishedAt !== null, JSON.stringify(ended));
      await assert.rejects(sb.resize('cmd_none', 10, 10), (e: unknown) => e instanceof WarrenError);
    });

    test('files: 3 MiB both ways in many chunks, stat, list, mkdir, move, remove; archives both ways; errors keep their codes', async () => {
      const big = randomBytes(3 << 20);
      await sb.files.write('/work/big.bin', big, { mode: 0o640 });
      assert.ok(Buffer.from(await sb.files.read('/work/big.bin')).equals(big));
      const st = await sb.files.stat('/work/big.bin');
      assert.deepEqual([st.size, st.mode & 0o777], [big.length, 0o640]);
      await sb.files.mkdir('/work/d/e');
      await sb.files.move('/work/big.bin', '/work/d/e/moved.bin');
      const names = (await sb.files.list('/work', 3)).map((e) => e.path).sort();
      assert.deepEqual(names, ['/work/d', '/work/d/e', '/work/d/e/moved.bin']);
      await sb.files.putArchive('/work/tar', makeTar([{ path: 'a/b.txt', content: 'in a tar' }]));
      assert.equal(await sb.files.readText('/work/tar/a/b.txt'), 'in a tar');
      const back = Buffer.from(await sb.files.getArchive('/work/tar'));
      assert.ok(back.includes('a/b.txt') && back.includes('in a tar'), 'the archive holds the file');
      await sb.files.remove('/work/d', { recursive: true });
      assert.equal(await sb.files.exists('/work/d'), false);
      await assert.rejects(sb.files.read('/no/such/file'), code('not_found'));
      await assert.rejects(sb.files.list('/work/tar/a/b.txt'), code('invalid_argument'));
    });

    test('pause freezes and records it; any call resumes; a commit makes an image a new sandbox runs', async () => {
      await sb.pause();
      assert.equal((await sb.refresh()).state, 'paused');
      assert.equal((await sb.exec('echo back')).stdout, 'back\n');
      assert.equal((await sb.refresh()).state, 'running');
      await sb.files.write('/work/committed.txt', 'kept in the image');
      const image = await sb.commit(`contract-${layer.edgeTransport}-${layer.store}:v1`);
      const child = await t.client.sandboxes.create({ image: image.name });
      try {
        assert.equal(await child.files.readText('/work/committed.txt'), 'kept in the image');
      } finally {
        await child.delete();
      }
    });

    test('network: rules set through the API reach the node; a port inside is served through the node', async () => {
      const web = await t.client.sandboxes.create({ image: 'busybox:latest', network: { egress: 'deny' } });
      try {
        await web.files.write('/www/index.html', 'served from inside');
        void web.exec('httpd -f -p 8080 -h /www', { timeoutMs: 60_000 }).catch(() => undefined);
        let page = '';
        await until(async () => (page = (await http(t, 'GET', `/v1/sandboxes/${web.id}/ports/8080/`)).text) === 'served from inside');
        assert.equal(page, 'served from inside');
        const info = await web.setNetwork({ egress: 'deny', allow: ['npm.example'] });
        assert.deepEqual(info.network.allow, ['npm.example']);
        assert.deepEqual((await web.refresh()).network.allow, ['npm.example']);
      } finally {
        await web.delete();
      }
    });

    test('lifetimes: a TTL set through the API ends the sandbox by the edge clock, and its end reaches the store through the event stream (and its own events)', async () => {
      const short = await t.client.sandboxes.create({ image: 'busybox:latest', lifetime: { ttlSeconds: 600 } });
      const info = await short.setTimeout(2);
      assert.equal(Date.parse(info.expiresAt ?? ''), clock.now() + 2000);
      clock.advance(2500);
      await t.warren.sweep();
      await until(async () => (await short.refresh()).state === 'stopped');
      // Its events, read from the store by sandbox after it ended.
      await until(async () => (await short.events()).some((e) => e.type === 'ended' && e.end?.reason === 'ttl'));
      await until(async () => hostLeftovers(short.id).length === 0);
      // A call on a sandbox that has ended answers conflict over every layer; one never made, not_found.
      assert.equal(errorCode(await http(t, 'POST', `/v1/sandboxes/${short.id}/exec`, { cmd: ['true'] })), 'conflict');
      assert.equal(errorCode(await http(t, 'POST', `/v1/sandboxes/sb_none/exec`, { cmd: ['true'] })), 'not_found');
    });

    test('a restart of the node that keeps its sandboxes: the new edge adopts them, files and sessions as they were', async () => {
      const sh = await sb.shell({ cwd: '/tmp' });
      await sh.exec('export AFTER=restart');
      await sb.files.write('/work/before.txt', 'written before');
      await t.close({ keep: true });
      t = await startTestWarren({ clock, dataDir: t.dataDir, edgeTransport: layer.edgeTransport, store: layer.store, database: t.database });
      const again = await t.client.sandboxes.get(sb.id);
      assert.equal(again.info.state, 'running');
      assert.equal(await again.files.readText('/work/before.txt'), 'written before');
      assert.equal((await again.exec('pwd; echo $AFTER', { session: sh.id })).stdout, '/tmp\nrestart\n');
      sb = again;
    });
  });
}
