import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { NODE_OPTIONS, upFlags, type NodeCommand } from './node-options.js';

// deploy/ (systemd units and Kubernetes manifests) passes flags and environment variables to
// `warren server` and `warren edge`: each must be one that command takes, or a deployment that
// looks right fails at its first start.
const deploy = (path: string): string => readFileSync(new URL(`../../../deploy/${path}`, import.meta.url), 'utf8');

/** The flags of a command line (`--flag value` or `--flag`), checked against the command's options. */
function checkArgs(where: string, args: string[]): void {
  const [cmd, ...rest] = args;
  assert.ok(cmd === 'server' || cmd === 'edge', `${where}: runs warren server or edge, not ${cmd}`);
  const flags = upFlags(cmd as NodeCommand);
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i]!;
    assert.ok(a.startsWith('--'), `${where}: "${a}" is not a flag`);
    const spec = flags[a.slice(2)];
    assert.ok(spec, `${where}: warren ${cmd} has no ${a}`);
    if (spec.type === 'string') {
      assert.ok(rest[i + 1] !== undefined && !rest[i + 1]!.startsWith('--'), `${where}: ${a} needs a value`);
      i++;
    }
  }
}

/** The environment variables a command reads. */
const envOf = (cmd: NodeCommand): Set<string> => new Set(NODE_OPTIONS.filter((n) => n.env && (n.for ?? ['up', 'edge']).includes(cmd)).map((n) => n.env!));

test('the Kubernetes manifests pass warren server and warren edge flags and variables they take', () => {
  const seen = new Set<string>();
  for (const file of ['kubernetes/server.yaml', 'kubernetes/edge.yaml']) {
    for (const doc of parseAllDocuments(deploy(file))) {
      assert.deepEqual(doc.errors, [], file);
      const o = doc.toJS() as { kind: string; spec?: { template?: { spec?: { containers?: Array<{ args: string[]; env?: Array<{ name: string }> }> } } } };
      for (const c of o.spec?.template?.spec?.containers ?? []) {
        checkArgs(`${file} (${o.kind})`, c.args);
        const cmd = c.args[0] as NodeCommand;
        seen.add(`${o.kind}:${cmd}`);
        // Variables that are Warren's own must be ones the command reads; the others feed $(…) in args.
        for (const e of c.env ?? [])
          if (e.name.startsWith('WARREN_')) assert.ok(envOf(cmd).has(e.name), `${file}: warren ${cmd} does not read ${e.name}`);
          else
            assert.ok(
              c.args.some((a) => a.includes(`$(${e.name})`)),
              `${file}: ${e.name} is used by no argument`,
            );
      }
    }
  }
  assert.deepEqual([...seen].sort(), ['DaemonSet:edge', 'Deployment:server']);
});

test('the systemd units run warren server and warren edge with flags they take', () => {
  for (const unit of ['systemd/warren-server.service', 'systemd/warren-edge.service']) {
    const exec = /^ExecStart=(.*)$/m.exec(deploy(unit))?.[1];
    assert.ok(exec, `${unit} has an ExecStart`);
    const words = exec.split(/\s+/);
    const at = words.findIndex((w) => w.endsWith('main.js'));
    assert.ok(at > 0, `${unit} runs the warren CLI`);
    checkArgs(unit, words.slice(at + 1));
    // What EnvironmentFile's comment says to set is read by the command (or used in ExecStart).
    const cmd = words[at + 1] as NodeCommand;
    for (const m of deploy(unit).matchAll(/^#\s+(WARREN_[A-Z_]+)=/gm))
      assert.ok(envOf(cmd).has(m[1]!) || exec.includes(`\${${m[1]!}}`), `${unit}: ${m[1]} is read by nothing`);
  }
});
