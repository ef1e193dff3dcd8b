import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { http, startTestWarren, type TestWarren } from './harness.js';

/** The request verl's sandbox-fusion tool and reward functions build (all fields, as they send them). */
const verlRequest = (
  code: string,
  o: { language?: string; stdin?: string; run_timeout?: number; files?: Record<string, string> } = {},
): Record<string, unknown> => ({
  compile_timeout: 10,
  run_timeout: o.run_timeout ?? 10,
  code,
  stdin: o.stdin ?? '',
  memory_limit_MB: 1024,
  language: o.language ?? 'python',
  files: o.files ?? {},
  fetch_files: [],
});

interface RunCodeAnswer {
  status: string;
  message: string;
  compile_result: null;
  run_result: { status: string; execution_time: number; return_code: number | null; stdout: string; stderr: string } | null;
  files: Record<string, string>;
}

describe('SandboxFusion run_code', () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren({ images: ['debian-python:latest'], network: false, fn: { maxWorkersPerImage: 1, queueLimit: 8 } });
  });
  after(async () => {
    await t?.close();
  });
  const runCode = async (body: unknown): Promise<RunCodeAnswer> => {
    const r = await http(t, 'POST', '/run_code', body);
    assert.equal(r.status, 200, r.text);
    return r.json as RunCodeAnswer;
  };

  test('python with stdin and files, bash, a failure, a timeout: SandboxFusion’s answer and status words', { timeout: 120_000 }, async () => {
    const ok = await runCode(
      verlRequest('import sys\nprint(int(sys.stdin.read()) * 2, open("data.txt").read())', {
        stdin: '21',
        files: { 'data.txt': Buffer.from('from a file').toString('base64') },
      }),
    );
    assert.equal(ok.status, 'Success', JSON.stringify(ok));
    assert.equal(ok.compile_result, null);
    assert.deepEqual(
      { ...ok.run_result, execution_time: 0 },
      { status: 'Finished', execution_time: 0, return_code: 0, stdout: '42 from a file\n', stderr: '' },
    );
    assert.ok(ok.run_result!.execution_time > 0 && ok.run_result!.execution_time < 10, 'seconds, not ms');
    assert.deepEqual(ok.files, {});

    const sh = await runCode(verlRequest('echo "$((6*7))"; echo oops >&2; exit 3', { language: 'bash' }));
    assert.equal(sh.status, 'Failed');
    assert.deepEqual([sh.run_result!.status, sh.run_result!.return_code, sh.run_result!.stdout, sh.run_result!.stderr], ['Finished', 3, '42\n', 'oops\n']);

    const slow = await runCode(verlRequest('while True: pass', { run_timeout: 1 }));
    assert.equal(slow.status, 'Failed');
    assert.equal(slow.run_result!.status, 'TimeLimitExceeded');
  });

  test('what is not served answers SandboxError; no key is refused; the key may come in the path', { timeout: 60_000 }, async () => {
    const rust = await runCode(verlRequest('fn main() {}', { language: 'rust' }));
    assert.equal(rust.status, 'SandboxError');
    assert.match(rust.message, /language rust/);
    assert.equal(rust.run_result, null);
    const fetch = await runCode({ ...verlRequest('print(1)'), fetch_files: ['/tmp/out'] });
    assert.equal(fetch.status, 'SandboxError');
    assert.match(fetch.message, /fetch_files/);
    const bad = await http(t, 'POST', '/run_code', { language: 'python' });
    assert.equal(bad.status, 400, 'no code: invalid_argument');

    const anonymous = await fetch_(`${t.url}/run_code`, verlRequest('print(1)'));
    assert.equal(anonymous.status, 401);
    const inPath = await fetch_(`${t.url}/sandboxfusion/${encodeURIComponent(t.key)}/run_code`, verlRequest('print(7 * 6)'));
    assert.equal(inPath.status, 200);
    assert.equal(((await inPath.json()) as RunCodeAnswer).run_result!.stdout, '42\n');
    const wrongKey = await fetch_(`${t.url}/sandboxfusion/wk_nosuchkey/run_code`, verlRequest('print(1)'));
    assert.equal(wrongKey.status, 401);
  });
});

/** A POST with no key (what SandboxFusion's clients send). */
function fetch_(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}
