import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { callSpec } from './fn.js';

/** A default image, which Warren built itself. */
const TRUSTED = { env: {}, builtIn: true };

test('a call spec resolves files against cwd, encodes them, and keeps the base environment', () => {
  const s = callSpec(
    {
      language: 'python',
      code: 'print(1)',
      cwd: '/work',
      files: [
        { path: 'a/../b.txt', content: 'aGk=', encoding: 'base64' },
        { path: '/etc/x', content: 'y' },
      ],
      env: { HOME: '/home/u', X: '1' },
    },
    TRUSTED,
  );
  assert.deepEqual(
    s.files.map((f) => [f.path, f.content.toString()]),
    [
      ['/work/b.txt', 'hi'],
      ['/etc/x', 'y'],
    ],
  );
  assert.ok(s.env.includes('HOME=/home/u') && s.env.includes('X=1') && s.env.some((e) => e.startsWith('PATH=')));
  assert.equal(s.cwd, '/work');
  assert.equal(s.timeoutMs, 10_000);
  assert.equal(s.zygote, true);
});

test('a call spec refuses files in /proc, /sys, /dev or at /; PYTHON* variables skip the zygote', () => {
  for (const path of ['/proc/self/attr/current', '../../sys/x', '/dev/null', '/', 'x/../../../dev']) {
    assert.throws(
      () => callSpec({ language: 'bash', code: 'true', cwd: '/tmp', files: [{ path, content: '' }] }),
      (e: unknown) => e instanceof WarrenError && e.code === 'invalid_argument',
      path,
    );
  }
  assert.equal(callSpec({ language: 'python', code: '', env: { PYTHONPATH: '/x' } }, TRUSTED).zygote, false);
  assert.equal(callSpec({ language: 'python', code: '', stdin: 'in' }).stdin?.toString(), 'in');
});

test("a call's environment is the base, then the image's own, then the call's; an image's PYTHON* build variables keep the zygote", () => {
  const s = callSpec(
    { language: 'python', code: '', env: { B: 'call' } },
    { env: { PATH: '/opt/bin:/bin', A: 'image', B: 'image', PYTHON_VERSION: '3.11' }, builtIn: true },
  );
  assert.ok(s.env.includes('PATH=/opt/bin:/bin') && s.env.includes('A=image') && s.env.includes('B=call') && s.env.includes('HOME=/root'), s.env.join(' '));
  assert.equal(s.zygote, true);
  assert.equal(callSpec({ language: 'python', code: '' }, { env: { PYTHONDONTWRITEBYTECODE: '1' }, builtIn: true }).zygote, false);
});

test("only Warren's own images get the zygote: another image's python3 would start while the worker holds CAP_SYS_ADMIN", () => {
  assert.equal(callSpec({ language: 'python', code: '' }, { env: {}, builtIn: false }).zygote, false);
  assert.equal(callSpec({ language: 'python', code: '' }).zygote, false, 'no image said: no zygote');
  assert.equal(callSpec({ language: 'python', code: '' }, TRUSTED).zygote, true);
});

test('a call a node never started goes once to another node; a tenant refused there is not sent on', async () => {
  const { FnService } = await import('./fn.js');
  const sent: string[] = [];
  const node = (id: string, answer: () => Promise<unknown>) => ({
    id,
    boot: id,
    state: 'ready',
    local: false,
    info: { backends: [{ name: 'container' }], capacity: { cpu: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 4096 } },
    load: { committed: { cpu: id === 'full' ? 0 : 1 } },
    api: {
      fnRun: async () => {
        sent.push(id);
        return answer();
      },
    },
  });
  const ok = async () => ({
    stdout: 'ok',
    stderr: '',
    exitCode: 0,
    signal: null,
    durationMs: 1,
    queuedMs: 0,
    timedOut: false,
    truncated: false,
    cold: false,
    held: { sandboxes: 0, cpu: 0, memoryMiB: 0 },
  });
  const full = node('full', async () => {
    throw new WarrenError('resource_exhausted', 'the node is full', { started: false });
  });
  const catalogue = { getImage: async () => ({ layers: ['sha256:1'], env: {}, builtIn: true, tenant: null }) };
  const caller = { tenant: 't', role: 'admin', quota: {} } as never;
  const fn = new FnService({ up: () => [full, node('spare', ok)] } as never, catalogue as never, { logger: { warn: () => undefined } });
  assert.equal((await fn.run(caller, { language: 'bash', code: 'true' })).stdout, 'ok');
  assert.deepEqual(sent, ['full', 'spare']);
  sent.length = 0;
  const quota = node('quota', async () => {
    throw new WarrenError('resource_exhausted', 'tenant "t" is over its quota');
  });
  const fn2 = new FnService({ up: () => [quota, node('spare', ok)] } as never, catalogue as never, { logger: { warn: () => undefined } });
  await assert.rejects(fn2.run(caller, { language: 'bash', code: 'true' }), /over its quota/);
  assert.deepEqual(sent, ['quota']);
});

test("a tenant's workers count in its quota on every replica: each node's last answer or heartbeat, whichever is later; a node gone counts nothing", async () => {
  const { FnService } = await import('./fn.js');
  const H = (sandboxes: number) => ({ sandboxes, cpu: sandboxes * 0.5, memoryMiB: sandboxes * 256 });
  const fnLoad = (at: number, held: number) => ({
    at,
    committed: { cpu: 0 },
    fn: { groups: [], calls: 0, timedOut: 0, failed: 0, rejected: 0, coldStarts: 0, queuedMs: 0, tenants: held ? [{ tenant: 't', ...H(held) }] : [] },
  });
  const rooms: unknown[] = [];
  const node = (id: string, at: number, held: number, answer: { held: number; at: number }) => ({
    id,
    boot: id,
    state: 'ready',
    local: false,
    info: { backends: [{ name: 'container' }], capacity: { cpu: 8, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 4096 } },
    load: fnLoad(at, held),
    api: {
      fnRun: async (c: { room: unknown }) => {
        rooms.push(c.room);
        return {
          stdout: '',
          stderr: '',
          exitCode: 0,
          signal: null,
          durationMs: 1,
          queuedMs: 0,
          timedOut: false,
          truncated: false,
          cold: true,
          held: H(answer.held),
          heldAt: answer.at,
        };
      },
    },
  });
  const catalogue = { getImage: async () => ({ layers: ['sha256:1'], env: {}, builtIn: true, tenant: null }) };
  const a = node('a', 100, 2, { held: 3, at: 150 });
  const b = node('b', 100, 1, { held: 0, at: 0 });
  let up = [a, b];
  const quiet = { logger: { warn: () => undefined } };
  // Replica two never sent a call: the heartbeats alone say what the workers of calls sent through replica one hold.
  const two = new FnService({ up: () => up } as never, catalogue as never, quiet);
  assert.deepEqual(two.held('t'), H(3));
  assert.deepEqual(two.held('other'), H(0));
  // Replica one's answer from a is later than a's heartbeat: it holds 3 there now.
  const one = new FnService({ up: () => [a] } as never, catalogue as never, {
    ...quiet,
    quota: { usage: async () => H(0) },
  });
  const caller = { tenant: 't', role: 'user', quota: { cpu: 4 } } as never;
  await one.run(caller, { language: 'bash', code: 'true' });
  assert.deepEqual(one.held('t'), H(3));
  // A heartbeat after the answer (a worker retired) is the truer.
  a.load = fnLoad(200, 1);
  assert.deepEqual(one.held('t'), H(1));
  // The room a node is sent counts the workers on the other nodes, by their heartbeats too.
  rooms.length = 0;
  const both = new FnService({ up: () => up } as never, catalogue as never, { ...quiet, quota: { usage: async () => H(0) } });
  b.api.fnRun = a.api.fnRun;
  await both.run(caller, { language: 'bash', code: 'true' });
  // Whichever node it went to, the other's one worker (0.5 CPU) is out of the quota of 4.
  assert.deepEqual(rooms, [{ cpu: 3.5 }]);
  // A node gone holds nothing any more.
  up = [b];
  assert.deepEqual(two.held('t'), H(1));
});
