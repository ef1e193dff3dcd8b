import { parseArgs } from 'node:util';
import { readFile } from 'node:fs/promises';
import { WarrenError } from '@warren/sdk';
import { kv } from '../args.js';
import { client } from '../client.js';
import { readStdin } from '../output.js';

/** `warren fn run`: one stateless call; exits with its exit code. */
export async function run(rest: string[]): Promise<number> {
  const [sub, ...args] = rest;
  if (sub !== 'run') throw new WarrenError('invalid_argument', 'usage: warren fn run -l LANGUAGE FILE|-');
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      language: { type: 'string', short: 'l' },
      image: { type: 'string' },
      timeout: { type: 'string' },
      stdin: { type: 'string' },
      file: { type: 'string', multiple: true },
      env: { type: 'string', multiple: true },
    },
  });
  const lang = values.language;
  if (lang !== 'python' && lang !== 'bash' && lang !== 'node') throw new WarrenError('invalid_argument', '-l is python, bash or node');
  const src = positionals[0];
  if (!src) throw new WarrenError('invalid_argument', 'name the file with the code (- for stdin)');
  const code = src === '-' ? await readStdin() : await readFile(src, 'utf8');
  const files = await Promise.all(
    Object.entries(kv(values.file)).map(async ([path, local]) => ({
      path,
      content: (await readFile(local)).toString('base64'),
      encoding: 'base64' as const,
    })),
  );
  const r = await (
    await client()
  ).fn.run({
    language: lang,
    code,
    image: values.image,
    timeoutMs: values.timeout ? Number(values.timeout) : undefined,
    stdin: values.stdin ? await readFile(values.stdin, 'utf8') : undefined,
    files,
    env: values.env ? kv(values.env) : undefined,
  });
  process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  if (r.timedOut) console.error(`warren: the call timed out after ${r.durationMs} ms`);
  if (r.truncated) console.error('warren: the output was cut at its limit (the call was stopped)');
  return r.exitCode ?? 128 + (r.signal === 'SIGKILL' ? 9 : 1);
}
