// Warren benchmark: one EdgeApi round trip alone, over the network transport on a Unix socket (the
// edge protocol), against the in-process adapter's cost of the same call: a stand-in edge in this
// process answers at once, so what is measured is the transport (JSON, frames, the socket), both
// of its ends in one process. Prints numbers; asserts nothing.
// Usage: npm run bench:edge-roundtrip [-- --calls 2000]
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { ExecEvent } from '@warren/api';
import { listenEdgeApi, remoteEdgeApi, type EdgeApi } from '@warren/edge';
import { machineLine } from './side-by-side.js';

const { values } = parseArgs({ options: { calls: { type: 'string', default: '2000' } } });
const CALLS = Number(values.calls);

const RESULT = { commandId: 'c_1', exitCode: 0, signal: null, stdout: 'hi\n', stderr: '', durationMs: 1, timedOut: false, truncated: false };
const INFO = {
  nodeId: 'n1',
  boot: 'b1',
  backends: [{ name: 'container', available: true }],
  networking: true,
  maxFileBytes: 1 << 30,
  capacity: { cpus: 2, memoryMiB: 1024 },
};

/** An edge that answers at once: `run` a result, `exec` a stream of one event, `info` its node. */
const standIn = {
  run: async () => RESULT,
  exec: async () => ({
    commandId: 'c_1',
    events: (async function* (): AsyncIterable<ExecEvent> {
      yield { type: 'exit', exitCode: 0, signal: null, durationMs: 1, timedOut: false, truncated: false } as ExecEvent;
    })(),
  }),
  info: async () => INFO,
} as unknown as EdgeApi;

const p = (xs: number[], q: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

async function time(fn: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < 200; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < CALLS; i++) {
    const t = process.hrtime.bigint();
    await fn();
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out;
}

async function main(): Promise<void> {
  console.log(machineLine());
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-roundtrip-'));
  const socketPath = join(dir, 'edge.sock');
  const served = await listenEdgeApi(standIn, socketPath, { token: 'bench' });
  const remote = remoteEdgeApi({ socketPath, token: 'bench' });
  try {
    const calls: Array<[string, (e: EdgeApi) => Promise<unknown>]> = [
      ['run (a command and its result)', (e) => e.run('sb_1', { cmd: ['true'] })],
      [
        'exec (a command and its event stream)',
        async (e) => {
          const s = await e.exec('sb_1', { cmd: ['true'] });
          for await (const _ of s.events) void _;
        },
      ],
      ['info', (e) => e.info()],
    ];
    console.log(`${CALLS} calls each, after 200 to warm up; ms`);
    console.log('call'.padEnd(40), 'remote p50', 'p99', '  in-process p50');
    for (const [name, call] of calls) {
      const far = await time(() => call(remote));
      const local = await time(() => call(standIn));
      console.log(name.padEnd(40), p(far, 0.5).toFixed(3).padStart(10), p(far, 0.99).toFixed(3).padStart(6), p(local, 0.5).toFixed(4).padStart(10));
    }
  } finally {
    remote.disconnect();
    await served.close();
    await rm(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
