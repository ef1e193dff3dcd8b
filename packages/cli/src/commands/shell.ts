import { createInterface } from 'node:readline';
import type { Sandbox } from '@warren/sdk';
import { sandbox } from '../client.js';

/**
 * `warren shell ID`: on a terminal, a real one in the sandbox (raw mode: every key goes there,
 * ^C included; its size follows the window). Otherwise (stdin a pipe or a file) a persistent
 * shell session, one command per line.
 */
export async function run(rest: string[]): Promise<number> {
  const sb = await sandbox(rest[0]);
  return process.stdin.isTTY && process.stdout.isTTY ? terminal(sb) : lines(sb);
}

async function terminal(sb: Sandbox): Promise<number> {
  const out = process.stdout;
  const t = await sb.terminal({ cols: out.columns, rows: out.rows });
  t.onData((d) => out.write(d));
  let ended = false;
  // Keys wait in the tty while the sandbox takes its input slower than they come (a big paste).
  const onKey = (d: Buffer): void => {
    if (t.write(d)) return;
    process.stdin.pause();
    void t.drained().then(() => ended || process.stdin.resume());
  };
  const onResize = (): void => t.resize(out.columns, out.rows);
  process.stdin.setRawMode(true);
  process.stdin.on('data', onKey);
  out.on('resize', onResize);
  try {
    const exit = await t.exited;
    return exit.exitCode ?? 128;
  } finally {
    ended = true;
    out.off('resize', onResize);
    process.stdin.off('data', onKey);
    process.stdin.setRawMode(false);
    process.stdin.pause();
  }
}

async function lines(sb: Sandbox): Promise<number> {
  const sh = await sb.shell();
  const rl = createInterface({ input: process.stdin, terminal: false });
  let last = 0;
  for await (const line of rl) {
    if (!line.trim()) continue;
    for await (const ev of sh.execStream(line, { timeoutMs: 3_600_000 })) {
      if (ev.type === 'stdout') process.stdout.write(ev.data);
      else if (ev.type === 'stderr') process.stderr.write(ev.data);
      else if (ev.type === 'exit') last = ev.exitCode ?? 128;
    }
  }
  await sh.close().catch(() => undefined);
  return last;
}
