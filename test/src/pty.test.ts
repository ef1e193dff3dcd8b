import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { connect, type Socket } from 'node:net';
import type { Sandbox, Terminal } from '@warren/sdk';
import { WarrenError } from '@warren/sdk';
import { WS_OPCODE, WsDecoder, wsFrame, wsKey, type WsMessage } from '@warren/api';
import { CLI, http, notOnMicrovm, startTestWarren, until, type TestWarren } from './harness.js';

/** The error code a call fails with (undefined if it does not fail). */
async function failsWith(p: Promise<unknown>): Promise<string | undefined> {
  return p.then(
    () => undefined,
    (e: unknown) => (e instanceof WarrenError ? e.code : String(e)),
  );
}

/** The pids of processes named `name` in the sandbox (the image may have no pgrep). */
async function pids(sb: Sandbox, name: string): Promise<string> {
  return (await sb.exec(`for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = ${name} ] && echo \${p#/proc/}; done; true`)).stdout.trim();
}

/**
 * A terminal's WebSocket spoken by hand over a raw socket, as a hostile or slow client would: the
 * client's socket (paused: nothing more is read until the test says so), the command's id, and
 * the server's side of the same connection (found by its port as the server accepts it; Warren
 * runs in this process), to count what the server holds for it.
 */
async function rawTerminal(t: TestWarren, sb: Sandbox): Promise<{ sock: Socket; commandId: string; server: Socket; rest: Buffer }> {
  const u = new URL(t.url);
  const accepted = new Map<number, Socket>();
  const onSocket = (m: unknown): void => {
    const socket = (m as { socket: Socket }).socket;
    accepted.set(socket.remotePort ?? 0, socket);
  };
  subscribe('net.server.socket', onSocket);
  try {
    const sock = connect(Number(u.port), u.hostname);
    sock.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
    sock.write(
      [
        `GET /v1/sandboxes/${sb.id}/pty HTTP/1.1`,
        `Host: ${u.host}`,
        'Connection: Upgrade',
        'Upgrade: websocket',
        `Sec-WebSocket-Key: ${wsKey()}`,
        'Sec-WebSocket-Version: 13',
        `Authorization: Bearer ${t.key}`,
        '',
        '',
      ].join('\r\n'),
    );
    let buf = Buffer.alloc(0);
    while (buf.indexOf('\r\n\r\n') < 0) {
      const chunk = await new Promise<Buffer>((resolve, reject) => sock.once('data', resolve).once('close', () => reject(new Error('closed before its 101'))));
      buf = Buffer.concat([buf, chunk]);
    }
    sock.pause();
    const end = buf.indexOf('\r\n\r\n');
    const head = buf.subarray(0, end).toString();
    assert.match(head, /^HTTP\/1.1 101/);
    const commandId = /x-command-id: (\S+)/i.exec(head)?.[1] ?? '';
    const server = accepted.get(sock.localPort ?? -1);
    assert.ok(server, "the server's side of the connection");
    return { sock, commandId, server, rest: buf.subarray(end + 4) };
  } finally {
    unsubscribe('net.server.socket', onSocket);
  }
}

/** Reads a raw terminal's messages from now on: what came, its output as text, and the close frame's code once one comes. */
function readMessages(sock: Socket, rest: Buffer): { messages: WsMessage[]; output: () => string; closeCode: () => number | undefined } {
  const decoder = new WsDecoder(false, 64 * 1024 * 1024);
  const messages: WsMessage[] = [];
  let output = '';
  let closeCode: number | undefined;
  const take = (chunk: Buffer): void => {
    for (const m of decoder.push(chunk)) {
      messages.push(m);
      if (m.opcode === WS_OPCODE.binary) output += m.payload.toString('utf8');
      if (m.opcode === WS_OPCODE.close) closeCode = m.payload.readUInt16BE(0);
    }
  };
  take(rest);
  sock.on('data', take);
  sock.resume();
  return { messages, output: () => output, closeCode: () => closeCode };
}

/** What this process holds now (its heap and its buffers), in bytes: Warren runs in it. */
function held(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

/** Resolves on the socket's next drain or close. */
function drainOrClose(sock: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      sock.off('drain', done);
      sock.off('close', done);
      resolve();
    };
    sock.on('drain', done);
    sock.on('close', done);
  });
}

/** Everything a terminal shows, as text, and a wait for some of it. */
function screen(t: Terminal): { text: () => string; waitFor: (s: string | RegExp, ms?: number) => Promise<void>; clear: () => void } {
  let out = '';
  t.onData((d) => (out += Buffer.from(d).toString('utf8')));
  return {
    text: () => out,
    clear: () => (out = ''),
    waitFor: async (s, ms = 20_000) => {
      try {
        await until(async () => (typeof s === 'string' ? out.includes(s) : s.test(out)), ms);
      } catch {
        throw new Error(`the terminal never showed ${String(s)}; it showed: ${JSON.stringify(out.slice(-2000))}`);
      }
    },
  };
}

describe('terminals', () => {
  let t: TestWarren;
  let sb: Sandbox;
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest'] });
    sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
  });
  after(async () => {
    await sb?.delete().catch(() => undefined);
    await t?.close();
  });

  test('a login shell on a real terminal: its size, resize, ^C to the foreground job, python3 interactively, exit', { timeout: 120_000 }, async () => {
    const term = await sb.terminal({ cols: 100, rows: 30 });
    const s = screen(term);
    assert.match(term.commandId, /^cmd_/);
    term.write('tty; stty size; echo "TERM=$TERM"\r');
    await s.waitFor(/\/dev\/pts\/\d+\r\n30 100\r\nTERM=xterm-256color/);
    // The command is listed while it runs, on its terminal.
    const listed = (await sb.commands()).find((c) => c.commandId === term.commandId);
    assert.ok(listed && listed.pty && listed.pid > 0 && listed.tag === 'pty', JSON.stringify(listed));

    term.resize(132, 43);
    s.clear();
    term.write('stty size\r');
    await s.waitFor('43 132');

    // ^C reaches the foreground job through the line discipline, not the shell.
    s.clear();
    term.write('sleep 1000; echo "slept-$((40+2))"\r');
    await until(async () => (await pids(sb, 'sleep')) !== '', 10_000);
    term.write('\x03');
    term.write('echo "status=$?"\r');
    await s.waitFor('status=130');
    assert.ok(!s.text().includes('slept-42'), 'the line after the sleep did not run');
    assert.equal(await pids(sb, 'sleep'), '', 'the sleep is gone');

    // python3 at its interactive prompt, as a person would use it.
    s.clear();
    term.write('python3 -q\r');
    await s.waitFor('>>> ');
    term.write('import sys; print(sys.stdin.isatty(), 6 * 7)\r');
    await s.waitFor('True 42');
    term.write('exit()\r');
    term.write('exit 7\r');
    assert.deepEqual(await term.exited, { exitCode: 7, signal: null });
    await until(async () => !(await sb.commands()).some((c) => c.commandId === term.commandId), 5000);
  });

  test('a full-screen program (curses) draws where it says and reads single keys', { timeout: 60_000 }, async () => {
    await sb.files.write(
      '/tmp/fs.py',
      [
        'import curses',
        'def main(w):',
        '    rows, cols = w.getmaxyx()',
        '    w.addstr(rows - 1, 0, "BOTTOM %dx%d" % (cols, rows))',
        '    w.refresh()',
        '    k = w.getkey()',
        '    open("/tmp/key", "w").write(k)',
        'curses.wrapper(main)',
      ].join('\n'),
    );
    const term = await sb.terminal({ cols: 90, rows: 20 });
    const s = screen(term);
    term.write('python3 /tmp/fs.py; exit\r');
    // The cursor goes to the last row (row 20) before the text.
    await s.waitFor(/\x1b\[20(;1H|d)BOTTOM 90x20/);
    term.write('q');
    assert.equal((await term.exited).exitCode, 0);
    assert.equal(await sb.files.readText('/tmp/key'), 'q');
  });

  test('a command with pty through exec; resize and bad input; a closed terminal hangs its shell up', { timeout: 60_000 }, async () => {
    const r = await sb.exec('tty; stty size; printf "a\\nb"', { pty: { cols: 70, rows: 10 } });
    // Output and errors share the terminal; the line discipline turns \n into \r\n.
    assert.match(r.stdout, /^\/dev\/pts\/\d+\r\n10 70\r\na\r\nb$/);
    assert.equal(r.stderr, '');
    assert.equal(r.exitCode, 0);

    const plain = sb.execStream('sleep 30', {});
    const first = (await plain.next()).value as { type: string; commandId: string; pid?: number };
    assert.equal(first.type, 'start');
    assert.ok(first.pid && first.pid > 0, 'the start event carries the pid');
    assert.equal(await failsWith(sb.resize(first.commandId, 80, 24)), 'invalid_argument');
    await sb.kill(first.commandId, 'SIGKILL');
    await plain.return(undefined);
    assert.equal(await failsWith(sb.exec('true', { pty: { cols: 0, rows: 10 } })), 'invalid_argument');
    assert.equal(await failsWith(sb.resize('cmd_nosuch', 80, 24)), 'not_found');
    // A plain GET of the terminal's path answers what it needs.
    const get = await http(t, 'GET', `/v1/sandboxes/${sb.id}/pty`);
    assert.equal(get.status, 400);

    const term = await sb.terminal();
    const s = screen(term);
    term.write('echo ready-$((1+1))\r');
    await s.waitFor('ready-2');
    term.close();
    await until(async () => !(await sb.commands()).some((c) => c.commandId === term.commandId), 10_000);
  });

  test(
    'a terminal goes on showing output past its 10 MiB: the oldest is dropped, not the newest',
    { timeout: 120_000, ...notOnMicrovm('output retention is the edge’s') },
    async () => {
      const term = await sb.terminal({ cols: 80, rows: 24 });
      let bytes = 0;
      let tail = '';
      term.onData((d) => {
        bytes += d.length;
        tail = (tail + Buffer.from(d).toString('latin1')).slice(-400);
      });
      term.write('head -c 12000000 /dev/zero | tr "\\0" a; echo; echo "DONE-$((6*7))"\r');
      await until(async () => tail.includes('DONE-42'), 100_000);
      assert.ok(bytes > 12_000_000, String(bytes));
      term.write('exit 3\r');
      assert.equal((await term.exited).exitCode, 3);
    },
  );

  test('the WebSocket refuses what RFC 6455 forbids and a caller without a key', { timeout: 30_000 }, async () => {
    const u = new URL(t.url);
    const raw = (auth: boolean, frames: Buffer[]): Promise<{ head: string; messages: Array<{ opcode: number; payload: Buffer }> }> =>
      new Promise((resolve, reject) => {
        const sock = connect(Number(u.port), u.hostname);
        let buf = Buffer.alloc(0);
        sock.on('data', (d: Buffer) => (buf = Buffer.concat([buf, d])));
        sock.on('error', reject);
        sock.on('close', () => {
          const end = buf.indexOf('\r\n\r\n');
          const head = buf.subarray(0, end).toString();
          const messages = head.startsWith('HTTP/1.1 101') ? new WsDecoder(false).push(buf.subarray(end + 4)) : [];
          resolve({ head, messages });
        });
        sock.write(
          [
            `GET /v1/sandboxes/${sb.id}/pty HTTP/1.1`,
            `Host: ${u.host}`,
            'Connection: Upgrade',
            'Upgrade: websocket',
            `Sec-WebSocket-Key: ${wsKey()}`,
            'Sec-WebSocket-Version: 13',
            ...(auth ? [`Authorization: Bearer ${t.key}`] : []),
            '',
            '',
          ].join('\r\n'),
        );
        setTimeout(() => {
          for (const f of frames) sock.write(f);
        }, 300);
      });
    assert.match((await raw(false, [])).head, /^HTTP\/1.1 401/);
    // An unmasked frame from a client is a protocol error: close 1002, and the shell is hung up.
    const bad = await raw(true, [wsFrame(WS_OPCODE.binary, Buffer.from('ls\r'), false)]);
    assert.match(bad.head, /^HTTP\/1.1 101/);
    const close = bad.messages.find((m) => m.opcode === WS_OPCODE.close);
    assert.equal(close?.payload.readUInt16BE(0), 1002);
    const shell = /x-command-id: (\S+)/i.exec(bad.head)?.[1];
    assert.ok(shell);
    await until(async () => !(await sb.commands()).some((c) => c.commandId === shell), 10_000).catch(async (e: unknown) => {
      throw new Error(`${String(e)}: the sandbox still runs ${JSON.stringify(await sb.commands())}`);
    });
    // Each session is an audit entry, as a call of the contract is: the one refused (no key) and the one opened.
    const audit = (await http(t, 'GET', `/v1/audit?sandbox=${sb.id}&limit=10000`)).json as { entries: Array<Record<string, unknown>> };
    const pty = audit.entries.filter((e) => e.path === `/v1/sandboxes/${sb.id}/pty`);
    assert.ok(
      pty.some((e) => e.status === 401 && e.keyId === null && e.code === 'unauthenticated'),
      JSON.stringify(pty),
    );
    assert.ok(
      pty.some((e) => e.status === 101 && e.keyId === 'admin' && e.method === 'GET' && e.code === null),
      JSON.stringify(pty),
    );
  });

  test(
    '30 MB of empty continuation frames (W3-02): the server closes with 1009 after a bounded number, and holds nothing for them',
    { timeout: 60_000 },
    async () => {
      const { sock, server, rest } = await rawTerminal(t, sb);
      const got = readMessages(sock, rest);
      const closed = new Promise<void>((resolve) => sock.once('close', resolve));
      const before = held();
      let grew = 0;
      let sent = 0;
      // A text frame without FIN, then 6-byte masked empty continuations without FIN, as the probe sends.
      sock.write(Buffer.from([0x01, 0x80, 0, 0, 0, 0]));
      const batch = Buffer.alloc(6 * 100_000);
      for (let i = 0; i < batch.length; i += 6) batch.set([0x00, 0x80, 0, 0, 0, 0], i);
      while (sent < 30_000_000 && got.closeCode() === undefined && !sock.destroyed) {
        if (!sock.write(batch)) await drainOrClose(sock);
        sent += batch.length;
        grew = Math.max(grew, held() - before);
        // Without a bound each empty frame costs the server ~190 bytes: stop before it takes the process down.
        if (grew > 256 * 1024 * 1024) break;
      }
      await until(async () => got.closeCode() !== undefined, 10_000).catch(() => {
        throw new Error(`no close frame after ${sent} bytes of empty fragments; the process grew by ${grew >> 20} MiB`);
      });
      assert.equal(got.closeCode(), 1009);
      assert.ok(sent < 30_000_000, `the server read all ${sent} bytes before it closed`);
      assert.ok(grew < 64 * 1024 * 1024, `the process grew by ${grew >> 20} MiB`);
      // And lets the connection go.
      await closed;
      await until(async () => server.destroyed, 10_000);
    },
  );

  test('a client that never reads: the server stops reading the terminal, and the client, at a bound', { timeout: 120_000 }, async () => {
    const { sock, server, commandId } = await rawTerminal(t, sb);
    try {
      // The terminal prints 8 MB (under what a command keeps, 10 MiB) while the client reads nothing.
      sock.write(wsFrame(WS_OPCODE.binary, Buffer.from('head -c 8000000 /dev/zero | tr "\\0" x; echo; echo "END-$((6*7))"\r'), true));
      // Another reader of the same command (it reads) says when the terminal has put out all of it.
      let tail = '';
      for await (const ev of sb.attach(commandId)) {
        if (ev.type === 'stdout') tail = (tail + ev.data).slice(-64);
        if (tail.includes('END-42')) break;
      }
      await new Promise((r) => setImmediate(r));
      assert.ok(server.writableLength <= 1024 * 1024, `the server holds ${server.writableLength} bytes for a client that does not read`);

      // Pings: each would be a pong the client never takes. The server stops reading them: what
      // the client sends stays with the client.
      const ping = wsFrame(WS_OPCODE.ping, Buffer.alloc(125, 0x70), true);
      const batch = Buffer.concat(Array.from({ length: 1000 }, () => ping));
      let sent = 0;
      while (sent < 32 * 1024 * 1024 && sock.writableLength < 2 * 1024 * 1024) {
        sock.write(batch);
        sent += batch.length;
        await new Promise((r) => setImmediate(r));
        assert.ok(server.writableLength <= 1024 * 1024, `the server holds ${server.writableLength} bytes after ${sent} bytes of pings`);
      }
      assert.ok(sock.writableLength >= 2 * 1024 * 1024, `the server read all ${sent} bytes of pings from a client that reads nothing`);

      // Once the client reads, all comes: the output, its end, and a pong for each ping read.
      const got = readMessages(sock, Buffer.alloc(0));
      await until(async () => got.output().includes('END-42'), 30_000);
      assert.ok(got.output().length > 8_000_000);
      await until(async () => sock.writableLength === 0 && got.messages.some((m) => m.opcode === WS_OPCODE.pong), 30_000);
    } finally {
      sock.destroy();
    }
  });
  test('keys to a shell that runs sleep (W3-04): the server reads the client no faster than the sandbox takes them', { timeout: 120_000 }, async () => {
    const { sock, rest } = await rawTerminal(t, sb);
    // The client reads all it is sent: only its input is held back.
    const got = readMessages(sock, rest);
    try {
      sock.write(wsFrame(WS_OPCODE.binary, Buffer.from('echo "READY-$((6*7))"; sleep 100000\r'), true));
      await until(async () => got.output().includes('READY-42') && (await pids(sb, 'sleep')) !== '', 20_000);
      // Whole lines: the terminal's line buffer fills with them and then takes no more (a partial
      // line it would drop past 4 KiB, taking every byte).
      const frame = wsFrame(WS_OPCODE.binary, Buffer.from(`${'a'.repeat(63)}\n`.repeat(1024)), true);
      const before = held();
      let grew = 0;
      let sent = 0;
      while (sent < 64 * 1024 * 1024 && sock.writableLength < 2 * 1024 * 1024) {
        sock.write(frame);
        sent += frame.length;
        await new Promise((r) => setImmediate(r));
        grew = Math.max(grew, held() - before);
      }
      assert.ok(
        sock.writableLength >= 2 * 1024 * 1024,
        `the server read all ${sent} bytes of keys; the process grew by ${grew >> 20} MiB; close ${got.closeCode()}: ${got.messages
          .filter((m) => m.opcode !== WS_OPCODE.binary)
          .map((m) => m.payload.toString())
          .join(' | ')}`,
      );
      assert.ok(grew < 32 * 1024 * 1024, `the process grew by ${grew >> 20} MiB after ${sent} bytes of keys`);
      // A client gone while the terminal's input is full still hangs the terminal up.
      sock.destroy();
      await until(async () => (await pids(sb, 'sleep')) === '', 20_000).catch(() => {
        throw new Error('the shell outlived its terminal: the hang-up did not get past its full input');
      });
    } finally {
      sock.destroy();
    }
  });
});

test(
  'a Warren closes while a terminal is open: the terminal ends with it, the close does not wait on its client',
  { timeout: 60_000, ...notOnMicrovm('the HTTP server’s') },
  async () => {
    const t = await startTestWarren({ images: ['debian-python:latest'] });
    try {
      const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
      const term = await sb.terminal();
      const s = screen(term);
      term.write('echo up-$((1+1))\r');
      await s.waitFor('up-2');
      const ended = term.exited.then(
        () => 'exited',
        () => 'lost',
      );
      // It waited for as long as the client kept its terminal open.
      await t.close();
      assert.ok(['exited', 'lost'].includes(await ended));
    } finally {
      await t.close();
    }
  },
);

test('warren shell on a terminal: raw keys, ^C, the window size, and its exit code', { timeout: 120_000 }, async () => {
  const t = await startTestWarren({ images: ['debian-python:latest'] });
  try {
    const sb = await t.client.sandboxes.create({ image: 'debian-python:latest' });
    // `script` gives the CLI a terminal of its own (stdin and stdout a tty) of a set size.
    const p = spawn('script', ['-qfec', `stty cols 77 rows 21; exec ${process.execPath} ${CLI} shell ${sb.id}`, '/dev/null'], {
      env: { ...process.env, WARREN_URL: t.url, WARREN_API_KEY: t.key },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => p.on('exit', (code) => resolve(code)));
    const waitFor = (s: string): Promise<void> =>
      until(async () => out.includes(s), 30_000).catch(() => {
        throw new Error(`never saw ${s}: ${JSON.stringify(out.slice(-1500))}`);
      });
    p.stdin.write('stty size; echo "x=$((6*7))"\r');
    await waitFor('21 77');
    await waitFor('x=42');
    p.stdin.write('sleep 1000\r');
    await until(async () => (await pids(sb, 'sleep')) !== '', 10_000);
    // In raw mode ^C is a key like any: it goes to the sandbox, and the CLI runs on.
    p.stdin.write('\x03');
    p.stdin.write('echo "after=$?"\r');
    await waitFor('after=130');
    p.stdin.write('exit 3\r');
    assert.equal(await exited, 3);
    await sb.delete();
  } finally {
    await t.close();
  }
});
