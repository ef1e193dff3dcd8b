/** Terminal output helpers of the commands. */

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export function fmtBytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;
}

/** A one-line progress bar on stderr when it is a terminal, plain lines otherwise. */
export function progressBar(): ((label: string, fraction: number) => void) & { done(): void } {
  const tty = process.stderr.isTTY;
  let last = '';
  const draw = (label: string, fraction: number): void => {
    const f = Math.max(0, Math.min(1, fraction));
    const width = 30;
    const line = `[${'#'.repeat(Math.round(f * width)).padEnd(width, '.')}] ${label}`;
    if (line === last) return;
    last = line;
    if (tty) process.stderr.write(`\r${line}\x1b[K`);
    else if (f === 1 || !label.startsWith('uploading')) process.stderr.write(line + '\n');
  };
  return Object.assign(draw, { done: () => tty && last && process.stderr.write('\n') });
}
