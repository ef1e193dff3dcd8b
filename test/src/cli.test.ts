import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { readFile, writeFile, chmod } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CLI, forceCleanup, hostLeftovers, IMAGE_CACHE, ownedTempDir, spawnUp, until } from './harness.js';
import { e2bKey } from '@warren/server';

const run = promisify(execFile);
let dataDir = '';
after(async () => {
  if (dataDir) await forceCleanup(dataDir);
});

test('the warren command is linked by npm (npx warren)', async () => {
  const bin = new URL('../../node_modules/.bin/warren', import.meta.url).pathname;
  const { stdout } = await run(bin, ['help']);
  assert.match(stdout, /warren up/);
});

test('warren up, the client commands, and warren down leave nothing behind', async () => {
  dataDir = await ownedTempDir('cli-');
  await chmod(dataDir, 0o711);
  const env = { ...process.env, WARREN_DATA_DIR: dataDir, WARREN_IMAGE_CACHE: IMAGE_CACHE, WARREN_API_KEY: '' };
  const server = await spawnUp(['--images', 'busybox:latest'], env);
  try {
    const url = server.url;
    const key = (await readFile(join(dataDir, 'admin.key'), 'utf8')).trim();
    const cenv = { ...env, WARREN_URL: url, WARREN_API_KEY: key };
    // What E2B's SDKs need, as lines a shell takes: the URLs and the key in E2B's shape.
    await until(async () => server.stdout().includes('E2B_API_KEY'), 5000);
    const exports = server
      .stdout()
      .split('\n')
      .filter((l) => l.startsWith('export E2B_'));
    assert.equal(exports.length, 3, server.stdout());
    const e2bEnv = (await run('bash', ['-c', `${exports.join('\n')}\nenv | grep ^E2B_ | sort`])).stdout;
    assert.equal(e2bEnv, `E2B_API_KEY=${e2bKey(key)}\nE2B_API_URL=${url}/e2b\nE2B_SANDBOX_URL=${url}/e2b/envd\n`);
    const w = async (...args: string[]): Promise<string> => (await run(process.execPath, [CLI, ...args], { env: cenv })).stdout;

    const id = (await w('create', 'busybox:latest', '--label', 'who=cli', '--env', 'X=1')).trim();
    assert.match(id, /^sb_/);
    assert.equal(await w('exec', id, '--', 'echo', 'a b'), 'a b\n');
    assert.equal(await w('exec', id, 'echo $((X+2))'), '3\n');
    await assert.rejects(w('exec', id, 'exit 4'), (e: { code?: number }) => e.code === 4);
    const local = join(dataDir, 'local.txt');
    await writeFile(local, 'from host');
    await w('cp', local, `${id}:/tmp/in.txt`);
    await w('cp', `${id}:/tmp/in.txt`, join(dataDir, 'back.txt'));
    assert.equal(await readFile(join(dataDir, 'back.txt'), 'utf8'), 'from host');
    assert.match(await w('ls', id, '/tmp'), /in\.txt/);
    assert.match(await w('ps', '--label', 'who=cli'), new RegExp(`${id}\\s+running`));
    await w('pause', id);
    assert.match(await w('ps'), new RegExp(`${id}\\s+paused`));
    await w('resume', id);
    const shell = await new Promise<string>((resolve, reject) => {
      const p = spawn(process.execPath, [CLI, 'shell', id], { env: cenv, stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (d: Buffer) => (out += d.toString()));
      p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`shell exited ${code}`))));
      p.stdin.end('cd /etc\nY=5\npwd; echo $Y\n');
    });
    assert.equal(shell, '/etc\n5\n');
    assert.match(await w('images'), /busybox:latest/);
    await w('rm', id);
    assert.match(await w('ps'), new RegExp(`${id}\\s+stopped`));
    const second = (await w('create', 'busybox:latest')).trim();

    assert.equal((await run(process.execPath, [CLI, 'down'], { env })).stdout.trim(), 'stopped');
    assert.equal(await server.exited, 0);
    assert.deepEqual([...hostLeftovers(id), ...hostLeftovers(second)], []);
    assert.doesNotMatch(await readFile('/proc/self/mounts', 'utf8'), new RegExp(dataDir));
  } finally {
    await server.kill('SIGKILL');
  }
});

test('Ctrl-C (SIGINT to the whole process group) stops every sandbox and unmounts everything', async () => {
  const dir = await ownedTempDir('cli-int-');
  await chmod(dir, 0o711);
  const env = { ...process.env, WARREN_API_KEY: 'int-key', WARREN_IMAGE_CACHE: IMAGE_CACHE };
  const server = await spawnUp(['--data-dir', dir, '--images', 'busybox:latest'], env);
  try {
    const { stdout } = await run(process.execPath, [CLI, 'create', 'busybox:latest'], { env: { ...env, WARREN_URL: server.url } });
    assert.match(stdout, /^sb_/);
    await server.interrupt();
    assert.equal(await server.exited, 0);
    assert.deepEqual(hostLeftovers(stdout.trim()), []);
    assert.doesNotMatch(await readFile('/proc/self/mounts', 'utf8'), new RegExp(dir));
  } finally {
    await server.kill('SIGKILL');
    await forceCleanup(dir);
  }
});
