import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { http, startTestWarren, until, type TestWarren } from './harness.js';

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

  test(
    'run_code leaves audit entries; a key in the path reaches neither them nor the logs, a body cut off included (W3-16, W3-17)',
    { timeout: 60_000 },
    async () => {
      const made = await http(t, 'POST', '/v1/keys', { tenant: 'fusion-audit', role: 'user' });
      const { key, keyId } = made.json as { key: string; keyId: string };
      const audit = async (): Promise<Array<{ keyId: string | null; path: string; status: number; code: string | null }>> =>
        (
          (await http(t, 'GET', '/v1/audit?tenant=fusion-audit')).json as {
            entries: Array<{ keyId: string | null; path: string; status: number; code: string | null }>;
          }
        ).entries;
      // The harness prints the server's warnings when WARREN_TEST_LOG is set: every one is kept here.
      const logged: string[] = [];
      const { error } = console;
      const was = process.env.WARREN_TEST_LOG;
      process.env.WARREN_TEST_LOG = '1';
      console.error = (...a: unknown[]) => void logged.push(a.map((x) => (typeof x === 'string' ? x : JSON.stringify(x))).join(' '));
      try {
        assert.equal((await fetch_(`${t.url}/sandboxfusion/${key}/run_code`, verlRequest('print(1)'))).status, 200);
        // A body cut off after the server has read much of it: 32 MiB of 48 sent, then the connection closed.
        const u = new URL(t.url);
        const sock = connect(Number(u.port), u.hostname);
        sock.on('error', () => undefined);
        sock.write(`POST /sandboxfusion/${key}/run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${48 * 2 ** 20}\r\n\r\n`);
        await new Promise((resolve) => sock.write(Buffer.alloc(32 * 2 ** 20, 32), resolve));
        sock.destroy();
        await until(async () => (await audit()).some((e) => e.status === 400), 10_000);
      } finally {
        console.error = error;
        if (was === undefined) delete process.env.WARREN_TEST_LOG;
        else process.env.WARREN_TEST_LOG = was;
      }
      const entries = await audit();
      assert.deepEqual(entries.map((e) => [e.keyId, e.path, e.status, e.code]).sort(), [
        [keyId, '/sandboxfusion/{key}/run_code', 200, null],
        [keyId, '/sandboxfusion/{key}/run_code', 400, 'invalid_argument'],
      ]);
      assert.ok(!logged.some((l) => l.includes(key)), logged.join('\n'));
    },
  );
});

/** A POST with no key (what SandboxFusion's clients send). */
function fetch_(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}
