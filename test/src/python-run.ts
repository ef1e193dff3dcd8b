// Running the Python client's programs from the tests.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// Debian's Python (scripts/setup.sh --test installs it, with setuptools, pip and mypy).
export const PYTHON = process.env.WARREN_PYTHON ?? (existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
export const PYTHON_DIR = fileURLToPath(new URL('../../python', import.meta.url));

/** Runs a Python program to its end; its exit code and output. */
export function runPython(args: string[], env: NodeJS.ProcessEnv, cwd = PYTHON_DIR, program = PYTHON): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(program, args, { cwd, env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', (code) => resolve({ code, out }));
  });
}
