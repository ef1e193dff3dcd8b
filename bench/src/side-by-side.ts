// Two or more Warren nodes measured in turns: every create and every batch of execs and file
// calls alternates between them, so drift of this noisy machine hits them alike. Used by the
// benchmarks that compare a change with its baseline (bench:hardening, bench:compare).
import { spawnSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import type { Sandbox } from '@warren/sdk';
import type { BenchNode } from './warren-up.js';
import { fmt, pct } from './stats.js';

export interface Samples {
  create: number[];
  /** Creates with a user, a workdir and two small files (an RL task's create). */
  setup: number[];
  del: number[];
  exec: number[];
  session: number[];
  file: number[];
  fn: number[];
}

export const newSamples = (): Samples => ({ create: [], setup: [], del: [], exec: [], session: [], file: [], fn: [] });

/** The command-line options of a side-by-side benchmark: rounds of creates and of exec batches. */
export const ROUND_OPTIONS = {
  rounds: { type: 'string', default: '4' },
  creates: { type: 'string', default: '40' },
  execs: { type: 'string', default: '400' },
} as const;

export interface Rounds {
  rounds: number;
  creates: number;
  execs: number;
}

/** Warms every node (layer mounts, page cache), then runs the rounds in turns; samples per node. */
export async function inTurns(nodes: BenchNode[], r: Rounds): Promise<Samples[]> {
  const samples = nodes.map(newSamples);
  for (const n of nodes) for (const image of ['busybox:latest', 'debian-python:latest']) await (await n.client.sandboxes.create({ image })).delete();
  for (let i = 0; i < r.rounds; i++) {
    await creates(nodes, samples, r.creates);
    await execs(nodes, samples, r.execs);
  }
  return samples;
}

/** The rows a side-by-side benchmark prints. */
export function rows(r: Rounds): Array<[string, keyof Samples]> {
  return [
    [`create busybox (sequential, n=${r.rounds * r.creates})`, 'create'],
    [`create + user, workdir, 2 files (n=${r.rounds * r.creates})`, 'setup'],
    [`delete (sequential, n=${2 * r.rounds * r.creates})`, 'del'],
    [`exec ['true'] as a fresh command (n=${r.rounds * r.execs})`, 'exec'],
    [`exec 'true' on a warm session (n=${r.rounds * r.execs})`, 'session'],
    [`1-byte file write + read (n=${r.rounds * r.execs})`, 'file'],
    [`FnCall python print(1), warm worker (n=${r.rounds * r.execs})`, 'fn'],
  ];
}

/** The node order for turn i: forwards, then backwards, so neither always goes first. */
const order = (n: number, i: number): number[] => {
  const ks = Array.from({ length: n }, (_, k) => k);
  return i % 2 ? ks.reverse() : ks;
};

/** What an RL task's create adds to a bare one: a user, a workdir and two small files. */
const TASK_SETUP = {
  user: 'agent',
  workdir: '/workspace/task',
  files: [
    { path: '/workspace/task/TASK.md', content: Buffer.from('# the task\n').toString('base64'), mode: 0o644 },
    { path: '/workspace/task/run.sh', content: Buffer.from('#!/bin/sh\necho run\n').toString('base64'), mode: 0o755 },
  ],
};

/** One create + delete of busybox on each node, in turns, then one with TASK_SETUP. */
export async function creates(nodes: BenchNode[], samples: Samples[], n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    for (const k of order(nodes.length, i)) {
      for (const [into, more] of [['create', {}] as const, ['setup', TASK_SETUP] as const]) {
        let s = performance.now();
        const sb = await nodes[k]!.client.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 }, ...more });
        samples[k]![into].push(performance.now() - s);
        s = performance.now();
        await sb.delete();
        samples[k]!.del.push(performance.now() - s);
      }
    }
  }
}

/**
 * Round trips on one debian-python sandbox per node, in batches of 50 taken in turns: a fresh
 * command, a command on a warm session, a 1-byte file write + read; and a FnCall on the node.
 */
export async function execs(nodes: BenchNode[], samples: Samples[], n: number): Promise<void> {
  const sbs: Sandbox[] = [];
  try {
    for (const node of nodes) sbs.push(await node.client.sandboxes.create({ image: 'debian-python:latest' }));
    const shells = await Promise.all(sbs.map((sb) => sb.shell()));
    for (let k = 0; k < sbs.length; k++) {
      for (let i = 0; i < 20; i++) {
        await sbs[k]!.exec(['true']);
        await shells[k]!.exec('true');
        await nodes[k]!.client.fn.run({ language: 'python', code: 'print(1)' });
      }
    }
    const time = async (into: number[], f: () => Promise<unknown>): Promise<void> => {
      for (let i = 0; i < 50; i++) {
        const s = performance.now();
        await f();
        into.push(performance.now() - s);
      }
    };
    for (let b = 0; b < n / 50; b++) {
      for (const k of order(nodes.length, b)) {
        const sb = sbs[k]!;
        await time(samples[k]!.exec, () => sb.exec(['true']));
        await time(samples[k]!.session, () => shells[k]!.exec('true'));
        await time(samples[k]!.file, async () => {
          await sb.files.write('/tmp/one-byte', 'x');
          await sb.files.read('/tmp/one-byte');
        });
        await time(samples[k]!.fn, () => nodes[k]!.client.fn.run({ language: 'python', code: 'print(1)' }));
      }
    }
  } finally {
    for (const sb of sbs) await sb.delete();
  }
}

/** Prints p50 and p90 of each row per node, and each node's p50 against the last one's. */
export function report(labels: string[], samples: Samples[], rows: Array<[string, keyof Samples]>): void {
  const head = labels.map((l) => l.padEnd(26)).join('');
  console.log(`${''.padEnd(46)}${head}p50 vs ${labels.at(-1) ?? ''}`);
  for (const [label, k] of rows) {
    const base = pct(samples.at(-1)![k], 50);
    const cells = samples.map((s) => `p50 ${fmt(pct(s[k], 50)).padEnd(9)} p90 ${fmt(pct(s[k], 90)).padEnd(9)}`.padEnd(26)).join('');
    const costs = samples.slice(0, -1).map((s) => {
      const c = ((pct(s[k], 50) - base) / base) * 100;
      return `${c >= 0 ? '+' : ''}${c.toFixed(1)} %`;
    });
    console.log(`${label.padEnd(46)}${cells}${costs.join(' ')}`);
  }
}

/** The machine a benchmark ran on, as its first line says it. */
export function machineLine(): string {
  return `machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`;
}

/**
 * Starts one node per entry, each on a data dir of its own, runs the rounds in turns and prints
 * the report (the last entry is what the others are compared with); stops and removes them all.
 */
export async function sideBySide(nodes: Array<{ label: string; start: (dataDir: string) => Promise<BenchNode> }>, r: Rounds): Promise<void> {
  const dirs: string[] = [];
  const running: BenchNode[] = [];
  try {
    for (const n of nodes) {
      const dir = await mkdtemp('/tmp/warren-bench-side-');
      chmodSync(dir, 0o711);
      dirs.push(dir);
      running.push(await n.start(dir));
    }
    report(
      nodes.map((n) => n.label),
      await inTurns(running, r),
      rows(r),
    );
  } finally {
    for (const n of running) await n.stop();
    for (const d of dirs) spawnSync('rm', ['-rf', d]);
  }
}
