// Warren benchmark: E2B's SDK (unchanged, against Warren) beside Warren's own SDK, in one run on
// one node: create a sandbox and run its first command, one at a time, then kill it. Target:
// E2B's SDK within 10 % of Warren's. For reference, E2B publishes ~150 ms to start a sandbox.
// Prints numbers; asserts nothing. Usage: npm run bench:e2b [-- --runs 20 --template debian-python:latest]
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Sandbox as E2bSandbox } from 'e2b';
import { e2bKey } from '@warren/server';
import { startWarrenUp } from './warren-up.js';
import { pct } from './stats.js';
import { machineLine } from './side-by-side.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '20' }, template: { type: 'string', default: 'debian-python:latest' } } });
const RUNS = Number(values.runs);
const TEMPLATE = values.template;

async function main(): Promise<void> {
  console.log(machineLine());
  const dataDir = await mkdtemp(join(tmpdir(), 'warren-bench-e2b-'));
  const node = await startWarrenUp(dataDir);
  try {
    const opts = { apiKey: e2bKey(node.key), apiUrl: `${node.url}/e2b`, sandboxUrl: `${node.url}/e2b/envd` };
    // E2B's SDK runs every command as `/bin/bash -l -c CMD` (a login shell, which reads the
    // image's profile); Warren's runs it with the platform's plain bash. Both are timed, so that
    // the protocols are compared on the same command.
    const warren = async (cmd: string | string[] = 'true'): Promise<number> => {
      const t0 = performance.now();
      const sb = await node.client.sandboxes.create({ image: TEMPLATE });
      await sb.exec(cmd);
      const ms = performance.now() - t0;
      await sb.delete();
      return ms;
    };
    const e2b = async (): Promise<number> => {
      const t0 = performance.now();
      const sb = await E2bSandbox.create(TEMPLATE, opts);
      await sb.commands.run('true');
      const ms = performance.now() - t0;
      await sb.kill();
      return ms;
    };
    // Warm the paths once, then alternate so that all see the same machine.
    await warren();
    await e2b();
    const w: number[] = [];
    const wl: number[] = [];
    const e: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      w.push(await warren());
      wl.push(await warren(['/bin/bash', '-l', '-c', 'true']));
      e.push(await e2b());
    }
    const line = (label: string, xs: number[]): string =>
      `  ${label.padEnd(40)} p50 ${pct(xs, 50).toFixed(1).padStart(6)} ms   p90 ${pct(xs, 90).toFixed(1).padStart(6)} ms`;
    console.log(`create + first command (\`true\`), ${TEMPLATE}, ${RUNS} runs each, alternating:`);
    console.log(line("Warren's SDK, `true`", w));
    console.log(line("Warren's SDK, `/bin/bash -l -c true`", wl));
    console.log(line("E2B's SDK (e2b 2.51.0) against Warren", e));
    console.log(
      `  E2B's SDK / Warren's SDK at p50, the same command: ${(pct(e, 50) / pct(wl, 50)).toFixed(2)}; each SDK's own way: ${(pct(e, 50) / pct(w, 50)).toFixed(2)}`,
    );
    console.log('  (E2B publishes ~150 ms to start a sandbox on its own service)');
  } finally {
    await node.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
