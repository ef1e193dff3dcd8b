import { createInterface } from 'node:readline';
import { sandbox } from '../client.js';

/** `warren shell ID`: a persistent shell, one command per line. */
export async function run(rest: string[]): Promise<number> {
  const sb = await sandbox(rest[0]);
  const sh = await sb.shell();
  const rl = createInterface({ input: process.stdin, terminal: false });
  if (process.stdin.isTTY) process.stderr.write(`${sb.id}$ `);
  let last = 0;
  for await (const line of rl) {
    if (!line.trim()) continue;
    for await (const ev of sh.execStream(line, { timeoutMs: 3_600_000 })) {
      if (ev.type === 'stdout') process.stdout.write(ev.data);
      else if (ev.type === 'stderr') process.stderr.write(ev.data);
      else if (ev.type === 'exit') last = ev.exitCode ?? 128;
    }
    if (process.stdin.isTTY) process.stderr.write(`${sb.id}$ `);
  }
  await sh.close().catch(() => undefined);
  return last;
}
