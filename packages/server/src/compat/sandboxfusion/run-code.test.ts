import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fnRequestOf, runCodeResponse } from './run-code.js';

test('run_code requests become FnCall calls: languages, seconds to ms, memory, files; others answer SandboxError', () => {
  assert.deepEqual(fnRequestOf({ code: 'print(1)', language: 'python', run_timeout: 2.5, memory_limit_MB: 300, stdin: 'x', files: { 'a.txt': 'aGk=' } }), {
    language: 'python',
    code: 'print(1)',
    stdin: 'x',
    timeoutMs: 2500,
    files: [{ path: 'a.txt', content: 'aGk=', encoding: 'base64' }],
    resources: { memoryMiB: 300 },
  });
  const plain = fnRequestOf({ code: 'echo', language: 'bash', memory_limit_MB: -1, stdin: null });
  assert.ok(!('status' in plain));
  assert.deepEqual([plain.language, plain.timeoutMs, plain.resources, plain.stdin], ['bash', 10_000, undefined, undefined]);
  assert.equal((fnRequestOf({ code: '', language: 'nodejs' }) as { language: string }).language, 'node');
  assert.equal((fnRequestOf({ code: '', language: 'cpp' }) as { status: string }).status, 'SandboxError');
  assert.equal((fnRequestOf({ code: '', language: 'python', fetch_files: ['x'] }) as { status: string }).status, 'SandboxError');
});

test('FnCall results in SandboxFusion’s words', () => {
  const base = { stdout: 'o', stderr: 'e', signal: null, durationMs: 1500, truncated: false, queuedMs: 0, killedBy: null };
  assert.deepEqual(runCodeResponse({ ...base, exitCode: 0, timedOut: false }).run_result, {
    status: 'Finished',
    execution_time: 1.5,
    return_code: 0,
    stdout: 'o',
    stderr: 'e',
  });
  assert.equal(runCodeResponse({ ...base, exitCode: 0, timedOut: false }).status, 'Success');
  assert.equal(runCodeResponse({ ...base, exitCode: 1, timedOut: false }).status, 'Failed');
  const slow = runCodeResponse({ ...base, exitCode: null, signal: 'SIGKILL', timedOut: true });
  assert.deepEqual([slow.status, slow.run_result?.status], ['Failed', 'TimeLimitExceeded']);
  const killed = runCodeResponse({ ...base, exitCode: null, signal: 'SIGKILL', timedOut: false });
  assert.deepEqual([killed.status, killed.run_result?.status], ['Failed', 'Error']);
});
