/**
 * What the API does with what a request leaves out, written once: the schemas show these in the
 * OpenAPI (`default`), and the edge and the control plane apply them. The sandbox's resources and
 * lifetime, and FnCall's size, are a server's defaults: a deployment may set others.
 */
export const DEFAULTS = {
  exec: { timeoutMs: 60_000, maxOutputBytes: 10 * 1024 * 1024 },
  fn: { timeoutMs: 10_000, maxOutputBytes: 1024 * 1024, cwd: '/tmp', image: 'debian-python:latest', resources: { cpu: 1, memoryMiB: 512, pids: 256 } },
  sandbox: { resources: { cpu: 1, memoryMiB: 512, pids: 1024, cpuClass: 'latency' }, ttlSeconds: 3600 },
} as const;
