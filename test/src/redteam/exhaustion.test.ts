// run-tests: alone, fork and memory bombs, and output floods.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Sandbox, WarrenError } from '@warren/sdk';
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { CgroupV1, readOwnCgroupParent } from '@warren/edge';
import { errorCode, heldBytes, http, startTestWarren, until, type TestWarren } from '../harness.js';

const MiB = 1024 * 1024;

/** A raw HTTP GET whose client reads the response head and then never reads again. */
async function neverReads(t: TestWarren, path: string): Promise<{ socket: Socket; head: string; rest: string }> {
  const url = new URL(t.url);
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => undefined);
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${t.key}\r\n\r\n`);
  let got = '';
  await new Promise<void>((resolve) => {
    const onData = (c: Buffer): void => {
      got += c.toString('latin1');
      if (!got.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      socket.pause();
      resolve();
    };
    socket.on('data', onData);
  });
  return { socket, head: got.slice(0, got.indexOf('\r\n')), rest: got.slice(got.indexOf('\r\n\r\n') + 4) };
}

/**
 * One sandbox attacks its own limits while a neighbour keeps working: the attack stays inside
 * (the attacker's own command fails or is killed), the neighbour and the edge keep serving.
 */
describe('red team: exhaustion stays inside the sandbox', () => {
  let t: TestWarren;
  let attacker: Sandbox;
  let neighbour: Sandbox;
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest'], network: false });
    // Every sandbox here has a disk quota (the default, 10 GiB, where none is asked for).
    attacker = await t.client.sandboxes.create({ image: 'debian-python:latest', resources: { cpu: 0.5, memoryMiB: 256, pids: 128 } });
    neighbour = await t.client.sandboxes.create({ image: 'debian-python:latest' });
  });
  after(async () => {
    await t?.close();
  });

  async function neighbourFine(): Promise<void> {
    const r = await neighbour.exec('echo alive && python3 -c "print(sum(range(100)))"');
    assert.equal(r.stdout, 'alive\n4950\n');
    assert.equal((await http(t, 'GET', '/healthz')).status, 200);
  }

  test('a fork bomb meets the pids limit; the sandbox and its neighbour still serve', async () => {
    const r = await attacker.exec('bomb() { bomb | bomb & }; bomb; sleep 2', { timeoutMs: 5000 });
    assert.ok(r.timedOut || r.exitCode !== 0 || /Resource temporarily unavailable|fork/.test(r.stderr), JSON.stringify(r).slice(0, 300));
    await neighbourFine();
    // The bomb's processes went with its command; the sandbox runs commands again.
    let ok = false;
    for (let i = 0; i < 50 && !ok; i++) {
      ok = (await attacker.exec('echo back').catch(() => ({ stdout: '' }))).stdout === 'back\n';
      if (!ok) await new Promise((res) => setTimeout(res, 200));
    }
    assert.ok(ok, 'the sandbox recovers');
    // A command that ends leaves its background processes running (by design): bash retries a
    // failed fork for seconds, so bomb processes can linger and eat this sandbox's CPU share.
    // Clear them, so the tests after this one measure the sandbox and not the bomb.
    // While lingering bomb processes hold every pid the exec itself may be refused
    // (resource_exhausted: the sandbox is at its process limit): try again.
    let cleared = false;
    for (let i = 0; i < 100 && !cleared; i++) {
      const left = await attacker.exec('kill -9 -1 2>/dev/null; sleep 0.1; ps -o pid= | wc -l').catch((e: unknown) => {
        assert.equal((e as WarrenError).code, 'resource_exhausted', String(e));
        return { stdout: '' };
      });
      cleared = left.stdout !== '' && Number(left.stdout.trim()) <= 3;
      if (!cleared) await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(cleared, "the bomb's leftover processes are gone");
  });

  test('a memory bomb is OOM-killed inside its sandbox; its init and its neighbour live', async () => {
    const r = await attacker.exec(['python3', '-c', 'x = []\nwhile True: x.append(bytearray(16 << 20))'], { timeoutMs: 60_000 });
    assert.equal(r.signal, 'SIGKILL', JSON.stringify(r).slice(0, 300));
    assert.equal((await attacker.exec('echo survived')).stdout, 'survived\n');
    assert.equal((await t.client.sandboxes.get(attacker.id)).info.state, 'running');
    await neighbourFine();
  });

  test('flooding output is cut at the cap; a recursive walk of /proc and /sys ends and harms nothing', async () => {
    const flood = await attacker.exec('yes AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', { maxOutputBytes: 64 * 1024, timeoutMs: 3000 });
    assert.equal(flood.truncated, true);
    assert.ok(flood.stdout.length <= 64 * 1024);
    const walk = await attacker.exec(
      'find /proc /sys -xdev 2>/dev/null | wc -l; cat $(find /proc/self /sys/kernel -maxdepth 2 -type f 2>/dev/null | head -300) >/dev/null 2>&1; echo walked',
      {
        timeoutMs: 60_000,
      },
    );
    assert.match(walk.stdout, /^\d+\nwalked\n$/);
    await neighbourFine();
  });

  test('filling the disk stops at the sandbox’s quota (data and files); the neighbour and the node stay writable', async () => {
    const small = await t.client.sandboxes.create({ image: 'debian-python:latest', resources: { diskMiB: 8 } });
    try {
      const fill = await small.exec(
        'dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1 | grep -o "Disk quota exceeded" | head -1; sync; du -sm /tmp/fill | cut -f1',
        { timeoutMs: 60_000 },
      );
      assert.match(fill.stdout, /Disk quota exceeded/);
      assert.ok(Number(fill.stdout.trim().split('\n').pop()) <= 8, fill.stdout);
      // Many small files end at the same limit (metadata counts).
      const files = await small.exec(
        'rm -f /tmp/fill; mkdir /tmp/many && cd /tmp/many && i=0; while echo x > f$i 2>/dev/null; do i=$((i+1)); [ $i -ge 200000 ] && break; done; echo $i',
        {
          timeoutMs: 120_000,
        },
      );
      assert.ok(Number(files.stdout.trim()) < 200000, files.stdout);
      // Freed space is usable again.
      assert.equal((await small.exec('rm -rf /tmp/many; sync; head -c 1000000 /dev/zero > /tmp/again && echo ok')).stdout, 'ok\n');
      assert.equal((await neighbour.exec('head -c 50000000 /dev/zero > /tmp/big && echo ok; rm /tmp/big')).stdout, 'ok\n');
      assert.equal(await small.files.write('/tmp/api.txt', 'x'.repeat(1000)).then(() => 'ok'), 'ok');
      // No sandbox may be promised more than half the file system the sandboxes share.
      const huge = await http(t, 'POST', '/v1/sandboxes', { image: 'debian-python:latest', resources: { diskMiB: 2 ** 30 } });
      assert.equal(errorCode(huge), 'resource_exhausted', huge.text);
      await neighbourFine();
    } finally {
      await small.delete();
    }
  });

  test("the platform's set-up of a sandbox is not charged to a small CPU quota; the quota holds from then on", async () => {
    // 4 MiB of files written by the platform at create, under 1 ms of CPU per 100 ms period.
    const files = [{ path: '/root/repo.bin', content: Buffer.alloc(4 << 20, 7).toString('base64') }];
    const r = await http(t, 'POST', '/v1/sandboxes', { image: 'debian-python:latest', resources: { cpu: 0.01 }, files });
    assert.equal(r.status, 201, r.text);
    const id = (r.json as { id: string }).id;
    try {
      const dir = new CgroupV1().dir('cpu', `${readOwnCgroupParent()}/${id}`);
      const stat = await readFile(`${dir}/cpu.stat`, 'utf8');
      assert.match(stat, /^nr_throttled 0$/m, 'no period of the set-up was throttled');
      assert.equal((await readFile(`${dir}/cpu.cfs_quota_us`, 'utf8')).trim(), '1000');
      const spin = await http(t, 'POST', `/v1/sandboxes/${id}/exec`, {
        cmd: ['python3', '-c', 'import time\nt = time.time()\nwhile time.time() - t < 0.5: pass'],
      });
      assert.equal(spin.status, 200, spin.text);
      assert.doesNotMatch(await readFile(`${dir}/cpu.stat`, 'utf8'), /^nr_throttled 0$/m, 'its own work is');
    } finally {
      await http(t, 'DELETE', `/v1/sandboxes/${id}`);
    }
  });

  test('CPU is capped: a busy loop gets about its share', async () => {
    const r = await attacker.exec(
      ['python3', '-c', 'import os, time\nt = time.time()\nwhile time.time() - t < 2: pass\nprint(round(sum(os.times()[:2]) / 2, 2))'],
      {
        timeoutMs: 30_000,
      },
    );
    // 0.5 CPU: about 1 s of CPU in 2 s (generous bounds for a busy 2-core machine).
    const used = Number(r.stdout);
    if (!(used > 0.2 && used < 0.75)) {
      const dir = new CgroupV1().dir('cpu', `${readOwnCgroupParent()}/${attacker.id}`);
      const cg = await Promise.all(['cpu.cfs_quota_us', 'cpu.stat'].map((f) => readFile(`${dir}/${f}`, 'utf8').catch((e: Error) => e.message)));
      assert.fail(`a busy loop in a 0.5-CPU sandbox used ${used} CPU (${JSON.stringify(r).slice(0, 200)}); its cgroup: ${cg.join(' | ')}`);
    }
    await neighbourFine();
  });

  test('stdin to a command that never reads: one write waits, the rest answer resource_exhausted; the server holds no more than that', async (ctx) => {
    const victim = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    let first: ReturnType<typeof http> | null = null;
    try {
      const it = victim.execStream(['sleep', '600'], { keepStdinOpen: true, timeoutMs: 600_000 });
      const start = await it.next();
      assert.ok(!start.done && start.value.type === 'start');
      const cid = start.value.commandId;
      await it.return(undefined);
      const body = Buffer.alloc(16 * MiB, 120);
      const path = `/v1/sandboxes/${victim.id}/commands/${cid}/stdin`;
      const before = await heldBytes();
      // The first write waits for the command to read (it never does); each one after is refused.
      first = http(t, 'POST', path, body);
      // It waits once a byte more is refused (a byte that comes first is taken at once).
      await until(async () => errorCode(await http(t, 'POST', path, Buffer.from('x'))) === 'resource_exhausted', 30_000);
      const codes: Array<string | number> = [];
      for (let i = 0; i < 12; i++) {
        const r = await http(t, 'POST', path, body);
        codes.push(r.status === 204 ? 204 : (errorCode(r) ?? r.status));
      }
      const grown = (await heldBytes()) - before;
      ctx.diagnostic(`held after 12 x 16 MiB of stdin: +${(grown / MiB).toFixed(1)} MiB (rss ${(process.memoryUsage().rss / MiB).toFixed(0)} MiB)`);
      assert.deepEqual(new Set(codes), new Set(['resource_exhausted']), codes.join(' '));
      // 12 writes of 16 MiB taken at once would be 192 MiB held for the sandbox's socket.
      assert.ok(grown < 96 * MiB, `the server grew by ${(grown / MiB).toFixed(0)} MiB`);
      await neighbourFine();
    } finally {
      // A signal cannot reach a command whose stdin is full (its init stops reading the
      // connection): the sandbox goes, and the waiting write ends with it, never a success.
      await victim.delete();
    }
    const r = await first;
    assert.notEqual(r?.status, 204, r?.text);
  });

  test('a follow replays retained output only as fast as its client reads: clients that never read pin nothing', async (ctx) => {
    const size = 32 * MiB;
    const r = await attacker.exec(`head -c ${size} /dev/zero | tr '\\0' x; echo done >&2`, { maxOutputBytes: size + 64, timeoutMs: 60_000 });
    assert.equal(r.stdout.length, size);
    const cid = r.commandId;
    const before = await heldBytes();
    const clients = await Promise.all(Array.from({ length: 8 }, () => neverReads(t, `/v1/sandboxes/${attacker.id}/commands/${cid}`)));
    for (const c of clients) assert.match(c.head, /^HTTP\/1\.1 200/);
    const grown = (await heldBytes()) - before;
    ctx.diagnostic(
      `held for 8 clients that do not read a 32 MiB replay: +${(grown / MiB).toFixed(1)} MiB (rss ${(process.memoryUsage().rss / MiB).toFixed(0)} MiB)`,
    );
    // Each replay whole in its response's buffer: 8 x 32 MiB (and more as JSON); what a client
    // takes into its socket's buffers, held again as the events sent: 8 x 4 MiB.
    assert.ok(grown < 24 * MiB, `the server grew by ${(grown / MiB).toFixed(0)} MiB for 8 clients that do not read`);
    // One that reads on gets all of it, in events of at most 64 KiB.
    const one = clients[0]!.socket;
    let text = clients[0]!.rest;
    const ended = new Promise<void>((resolve) => one.once('end', resolve));
    one.setEncoding('latin1');
    one.on('data', (c: string) => (text += c));
    one.resume();
    await Promise.race([ended, until(async () => text.includes('"type":"exit"'), 60_000)]);
    const events = text
      .split('\r\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { type: string; data?: string });
    const out = events.filter((e) => e.type === 'stdout').map((e) => e.data ?? '');
    assert.equal(out.join('').length, size);
    assert.ok(Math.max(...out.map((d) => d.length)) <= 64 * 1024);
    for (const c of clients) c.socket.destroy();
    await neighbourFine();
  });
});
