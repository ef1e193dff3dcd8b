import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import type { Sandbox, Terminal } from '@warren/sdk';
import { WarrenError } from '@warren/sdk';
import { WS_OPCODE, WsDecoder, wsFrame, wsKey } from '@warren/api';
import { CLI, http, startTestWarren, until, type TestWarren } from './harness.js';

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
  });
});

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
