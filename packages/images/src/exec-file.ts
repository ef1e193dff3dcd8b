import { spawn } from 'node:child_process';

export interface RunResult {
  stdout: string;
  stderr: string;
}

/** Runs a program to completion; rejects with its stderr when it fails. Output is capped at 4 MiB. */
export function runFile(file: string, args: string[], opts: { cwd?: string; signal?: AbortSignal; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { cwd: opts.cwd, signal: opts.signal, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    const take = (into: Buffer[]) => (b: Buffer) => {
      size += b.length;
      if (size <= 4 * 1024 * 1024) into.push(b);
    };
    child.stdout.on('data', take(out));
    child.stderr.on('data', take(err));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      const stdout = Buffer.concat(out).toString();
      const stderr = Buffer.concat(err).toString();
      if (code === 0) resolve({ stdout, stderr });
      else reject(new Error(`${file} ${args.slice(0, 3).join(' ')} failed (${signal ?? code}): ${stderr.trim().slice(-2000)}`));
    });
  });
}
