// Warren benchmark: the floor under one single create through the API on this machine. A bare
// node:http server (in a process of its own) answers every POST of a create's small JSON body
// with a create answer's size of JSON, and this process sends them the way bench:cluster's load
// does (node:http, kept-alive connections, N in flight). What each side spends per request is
// what no control plane, however lean, can go below: a single create also makes an edge call and
// a database write on top. Prints numbers; asserts nothing.
// Usage: npm run bench:http-floor [-- --requests 20000 --concurrency 128]
import { spawn } from 'node:child_process';
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { machineLine } from './side-by-side.js';
import { processCpuSeconds } from './stats.js';

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '128' },
    serve: { type: 'boolean', default: false },
  },
});

/** A create's answer: the size and shape of what `POST /v1/sandboxes` returns. */
const ANSWER = JSON.stringify({
  id: 'sb_0123456789abcdef0123',
  state: 'running',
  node: 'sim-001',
  backend: 'container',
  image: 'busybox:latest',
  layers: [],
  labels: {},
  resources: { cpu: 1, memoryMiB: 256, pids: 1024, diskMiB: null },
  network: { egress: 'deny', allow: [], deny: [] },
  lifetime: { ttlSeconds: 3600, idleTimeoutSeconds: null, pauseAfterIdleSeconds: null, ttlCountsPaused: false },
  createdAt: new Date().toISOString(),
  expiresAt: new Date().toISOString(),
  lastActivityAt: new Date().toISOString(),
  usage: null,
  error: null,
  pad: 'x'.repeat(400),
});
const BODY = JSON.stringify({ image: 'busybox:latest', resources: { cpu: 1, memoryMiB: 256 } });

/** CPU ms (user + system) a process has used. */
const cpuMs = (pid: number | 'self'): number => processCpuSeconds(pid) * 1000;

function serve(): void {
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      JSON.parse(Buffer.concat(parts).toString('utf8'));
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(ANSWER) });
      res.end(ANSWER);
    });
  });
  server.listen(0, '127.0.0.1', () => console.log(`port ${(server.address() as AddressInfo).port}`));
}

async function main(): Promise<void> {
  const requests = Number(values.requests);
  const concurrency = Number(values.concurrency);
  console.log(machineLine());
  const child = spawn(process.execPath, [process.argv[1]!, '--serve'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const agent = new Agent({ keepAlive: true, maxSockets: 1024 });
  try {
    const port = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        const m = /port (\d+)/.exec(d.toString());
        if (m?.[1]) resolve(m[1]);
      });
      child.once('exit', () => reject(new Error('the server exited')));
    });
    const call = (): Promise<void> =>
      new Promise((resolve, reject) => {
        const req = request(`http://127.0.0.1:${port}/v1/sandboxes`, {
          method: 'POST',
          agent,
          headers: { authorization: 'Bearer key', 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) },
        });
        req.once('error', reject);
        req.once('response', (res) => {
          const parts: Buffer[] = [];
          res.on('data', (d: Buffer) => parts.push(d));
          res.once('end', () => {
            JSON.parse(Buffer.concat(parts).toString('utf8'));
            resolve();
          });
        });
        req.end(BODY);
      });
    for (let i = 0; i < 2000; i++) await call(); // warm up
    const server0 = cpuMs(child.pid!);
    const client0 = cpuMs('self');
    const t0 = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < requests) await call();
      }),
    );
    const s = (performance.now() - t0) / 1000;
    const server = (cpuMs(child.pid!) - server0) / requests;
    const client = (cpuMs('self') - client0) / requests;
    console.log(
      `bare node:http, ${requests} POSTs, ${concurrency} in flight: ${Math.round(requests / s)}/s; ` +
        `CPU ms per request: server ${server.toFixed(3)}, client ${client.toFixed(3)}, both ${(server + client).toFixed(3)}`,
    );
  } finally {
    child.kill();
    agent.destroy();
  }
}

if (values.serve) serve();
else
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
