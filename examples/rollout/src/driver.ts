#!/usr/bin/env node
// A preemption-safe rollout driver over the Warren SDK (see README.md).
import { readFile, rename, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { connect, type Sandbox } from '@warren/sdk';

/** What the driver has done, written after every step so a restart continues from there. */
interface State {
  /** Finished episodes: their results. */
  results: Record<string, EpisodeResult>;
  /** Steps in flight: command id and the output read so far. */
  steps: Record<string, { commandId: string; offset: number; output: string }>;
}

export interface EpisodeResult {
  episode: number;
  /** The test's output lines. */
  test: string[];
  /** How many times the logging step ran in the sandbox (1 when nothing ran twice). */
  runs: number;
  /** Its sandbox, deleted once the result is saved (absent in older state files). */
  sandbox?: string;
}

const { values } = parseArgs({
  options: {
    batch: { type: 'string', default: 'batch' },
    episodes: { type: 'string', default: '8' },
    parallel: { type: 'string', default: '4' },
    state: { type: 'string', default: 'rollout-state.json' },
    image: { type: 'string', default: 'debian-python:latest' },
  },
});
const BATCH = values.batch;
const warren = connect();

const state: State = await readFile(values.state, 'utf8').then(
  (t) => JSON.parse(t) as State,
  () => ({ results: {}, steps: {} }),
);
let saving: Promise<void> = Promise.resolve();

/** Saves the state atomically; saves queue up so the last one wins. */
function save(): Promise<void> {
  const text = JSON.stringify(state);
  saving = saving.then(async () => {
    await writeFile(`${values.state}.tmp`, text);
    await rename(`${values.state}.tmp`, values.state);
  });
  return saving;
}

/**
 * Runs a step's command exactly once: the first time with a requestId, after a restart by
 * re-attaching from the output offset the driver had read. Resolves the whole output.
 */
async function step(sb: Sandbox, key: string, cmd: string[]): Promise<string> {
  const known = state.steps[key];
  const events = known ? sb.attach(known.commandId, known.offset) : sb.execStream(cmd, { requestId: key, timeoutMs: 120_000 });
  let rec = known ?? { commandId: '', offset: 0, output: '' };
  for await (const ev of events) {
    if (ev.type === 'start') {
      // A retried exec re-attaches from the start: drop what an unrecorded first try had read.
      rec = { commandId: ev.commandId, offset: 0, output: '' };
      state.steps[key] = rec;
    } else if (ev.type === 'stdout') {
      rec.output += ev.data;
      rec.offset += Buffer.byteLength(ev.data);
      await save();
    } else if (ev.type === 'stderr') {
      // Offsets count the combined output.
      rec.offset += Buffer.byteLength(ev.data);
    } else if (ev.type === 'exit') {
      if (ev.exitCode !== 0) throw new Error(`${key} exited ${ev.exitCode}`);
    } else if (ev.type === 'error') {
      throw new Error(`${key}: ${ev.error.message}`);
    }
  }
  return rec.output;
}

async function episode(i: number): Promise<void> {
  const id = `${BATCH}-ep${i}`;
  const finished = state.results[id];
  if (finished) {
    // A crash may have come between saving the result and deleting the sandbox (delete is idempotent).
    if (finished.sandbox) await (await warren.sandboxes.get(finished.sandbox)).delete();
    return;
  }
  // The same requestId returns the sandbox the first create made, even after a crash.
  const sb = await warren.sandboxes.create({ image: values.image, requestId: id, labels: { batch: BATCH, episode: String(i) }, workdir: '/workspace' });
  // 1. The "agent" edits a file (idempotent: the same content every time).
  await sb.files.write('/workspace/sol.py', `def f(x):\n    return x * ${i + 1}\n`);
  // 2. It runs a test over it, reading the output as it streams.
  const test = await step(sb, `${id}-test`, [
    'python3',
    '-c',
    'import sys, time\nsys.path.insert(0, "/workspace")\nimport sol\nfor k in range(5):\n    print(sol.f(k), flush=True)\n    time.sleep(0.2)\n',
  ]);
  // 3. A side effect that shows whether anything ran twice.
  const runs = await step(sb, `${id}-log`, ['sh', '-c', 'echo ran >> /workspace/runs.log; wc -l < /workspace/runs.log']);
  state.results[id] = { episode: i, test: test.trim().split('\n'), runs: Number(runs.trim()), sandbox: sb.id };
  delete state.steps[`${id}-test`];
  delete state.steps[`${id}-log`];
  await save();
  await sb.delete();
}

const n = Number(values.episodes);
let next = 0;
await Promise.all(
  Array.from({ length: Math.min(Number(values.parallel), n) }, async () => {
    while (next < n) await episode(next++);
  }),
);
await saving;
console.log(JSON.stringify({ batch: BATCH, finished: Object.keys(state.results).length }));
