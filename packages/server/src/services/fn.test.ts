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
