#!/usr/bin/env node
// The `warren` command: a table of subcommands, each in commands/ and loaded only when named, so
// a client command (exec, ps, cp, …) loads the SDK alone, never the server, SQLite or the edge.
import { WarrenError } from '@warren/sdk';

type Command = (rest: string[], cmd: string) => Promise<number>;

const COMMANDS: Record<string, () => Promise<{ run: Command }>> = {
  up: () => import('./commands/up.js'),
  down: () => import('./commands/down.js'),
  server: () => import('./commands/server.js'),
  edge: () => import('./commands/edge.js'),
  create: () => import('./commands/create.js'),
  network: () => import('./commands/network.js'),
  exec: () => import('./commands/exec.js'),
  shell: () => import('./commands/shell.js'),
  cp: () => import('./commands/cp.js'),
  ls: () => import('./commands/ls.js'),
  ps: () => import('./commands/ps.js'),
  rm: () => import('./commands/state.js'),
  pause: () => import('./commands/state.js'),
  resume: () => import('./commands/state.js'),
  images: () => import('./commands/images.js'),
  layers: () => import('./commands/layers.js'),
  commit: () => import('./commands/commit.js'),
  fn: () => import('./commands/fn.js'),
};

async function run(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === 'help' || cmd === '--help' || cmd === '-h') {
    console.log((await import('./usage.js')).usage());
    return 0;
  }
  const load = Object.hasOwn(COMMANDS, cmd) ? COMMANDS[cmd] : undefined;
  if (!load) {
    console.error(`unknown command "${cmd}"\n\n${(await import('./usage.js')).USAGE}`);
    return 2;
  }
  return (await load()).run(rest, cmd);
}

run(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (e: unknown) => {
    if (e instanceof WarrenError) console.error(`warren: ${e.code}: ${e.message}`);
    else console.error(`warren: ${e instanceof Error ? e.message : String(e)}`);
    process.exitCode = 1;
  },
);
