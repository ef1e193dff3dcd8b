import { parseArgs } from 'node:util';
import { WarrenError } from '@warren/sdk';
import { sandbox } from '../client.js';

/** `warren exec ID -- CMD`: streams its output; exits with its exit code. */
export async function run(rest: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: { session: { type: 'string' }, timeout: { type: 'string' } } });
  const [id, ...words] = positionals;
  if (!words.length) throw new WarrenError('invalid_argument', 'name a command');
  const sb = await sandbox(id);
  let code = 0;
  const command = words.length === 1 ? (words[0] as string) : words;
  for await (const ev of sb.execStream(command, { session: values.session, timeoutMs: values.timeout ? Number(values.timeout) : undefined })) {
    if (ev.type === 'stdout') process.stdout.write(ev.data);
    else if (ev.type === 'stderr') process.stderr.write(ev.data);
    else if (ev.type === 'exit') code = ev.exitCode ?? 128;
    else if (ev.type === 'error') throw new WarrenError('unavailable', ev.error.message);
  }
  return code;
}
