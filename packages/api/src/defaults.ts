/**
 * What the API does with what a request leaves out, written once: the schemas show these in the
 * OpenAPI (`default`), and the edge and the control plane apply them. The sandbox's resources and
 * lifetime, and FnCall's size, are a server's defaults: a deployment may set others.
 */
export const DEFAULTS = {
  exec: { timeoutMs: 60_000, maxOutputBytes: 10 * 1024 * 1024 },
  fn: { timeoutMs: 10_000, maxOutputBytes: 1024 * 1024, cwd: '/tmp', image: 'debian-python:latest', resources: { cpu: 1, memoryMiB: 512, pids: 256 } },
  sandbox: { resources: { cpu: 1, memoryMiB: 512, pids: 1024, cpuClass: 'latency' }, ttlSeconds: 3600 },
  /**
   * The memory a sandbox asks to be counted for when it names no `memoryRequestMiB`: this share
   * of its limit (`memoryMiB`), rounded up. A node admits sandboxes by their requests, so a
   * quarter lets a node take four times as many sandboxes as its memory holds limits: most
   * sandboxes stay far under their limit (a busybox shell holds ~1 MiB, an idle Python with 50 MB
   * of data ~65 MiB, of the default 512 MiB), and the node pages out and pauses idle ones when
   * memory really runs short.
   */
  memoryRequestFraction: 0.25,
} as const;

/** The memory request of a sandbox that names none: DEFAULTS.memoryRequestFraction of its limit, rounded up (MiB). */
export function defaultMemoryRequestMiB(memoryLimitMiB: number): number {
  return Math.max(1, Math.ceil(memoryLimitMiB * DEFAULTS.memoryRequestFraction));
}

/** A sandbox's memory request: the one it named, else the default share of its limit (MiB). */
export function memoryRequestOf(r: { memoryMiB: number; memoryRequestMiB?: number | null }): number {
  return r.memoryRequestMiB ?? defaultMemoryRequestMiB(r.memoryMiB);
}
