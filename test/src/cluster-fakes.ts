import { createServer, request } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { once } from 'node:events';
import { listenEdgeApi, type EdgeApi, type EdgeEvent } from '@warren/edge';

// What cluster.test stands up besides real nodes: a hostile node (a fake edge on the real edge
// protocol), plain servers that count who reached them, and raw upgrade requests.

/**
 * A fake edge on the edge protocol (what anyone with the join token can run): it streams
 * `events`, and takes creates (it answers as a node with room) only with `dial`: its sandboxes'
 * ports are then a connection from the fake node to `dial`. Like a hostile node of the old
 * protocol, it also answers the port address it would have had the replica dial: 127.0.0.1.
 * Every other call fails.
 */
export async function fakeEdge(name: string, events: EdgeEvent[], dial?: number): Promise<{ join: Record<string, string>; close(): Promise<void> }> {
  const boot = `boot-${name}`;
  const held = new Set<string>();
  const state = (id: string) => ({ id, paused: false, lastActivityMs: Date.now(), expiresAtMs: null, usage: null, network: null });
  const room = dial ? 8 : 0;
  const calls: Record<string, unknown> = {
    info: async () => ({
      nodeId: name,
      boot,
      capacity: { cpu: room, memoryMiB: room * 1024, sandboxes: room, maxCpuPerSandbox: room, maxMemoryMiBPerSandbox: room * 1024 },
      networking: !!dial,
      maxFileBytes: 1 << 20,
      backends: dial ? [{ name: 'container', capabilities: { pause: true, commit: false, ports: true, fnWorkers: false, network: true } }] : [],
    }),
    load: async () => ({ at: 0, committed: { cpu: 0, memoryMiB: 0 }, requested: { cpu: 0, memoryMiB: 0 }, used: null, sandboxes: held.size, paused: 0 }),
    sandboxes: async (q?: { ids?: string[] }) => [...held].filter((id) => !q?.ids || q.ids.includes(id)).map(state),
    create: async (spec: { id: string }) => {
      held.add(spec.id);
      return state(spec.id);
    },
    destroy: async (id: string) => void held.delete(id),
    removeLeftovers: async () => [],
    portAddress: async () => '127.0.0.1',
    openPort: async () => {
      const c = connect({ host: '127.0.0.1', port: dial ?? 1 });
      await once(c, 'connect');
      c.pause();
      return c;
    },
    events: () => ({
      [Symbol.asyncIterator]: () => {
        let i = 0;
        let stop: (() => void) | null = null;
        return {
          next: () =>
            i < events.length
              ? Promise.resolve({ value: events[i++]!, done: false as const })
              : new Promise<IteratorResult<EdgeEvent>>((r) => (stop = () => r({ value: undefined, done: true }))),
          return: async () => {
            stop?.();
            return { value: undefined, done: true as const };
          },
        };
      },
    }),
  };
  const api = new Proxy(calls as unknown as EdgeApi, {
    get: (target, call: string) =>
      (target as unknown as Record<string, unknown>)[call] ?? (async () => Promise.reject(new Error(`the fake edge has no ${call}`))),
  });
  const token = 'fake-edge-token-0123456789';
  const served = await listenEdgeApi(api, { host: '127.0.0.1', port: 0 }, { token });
  return { join: { name, address: `127.0.0.1:${served.port}`, token, boot }, close: () => served.close() };
}

/** An HTTP server on `host` that answers `text` (with `status`) and counts the connections it took. */
export async function textServer(
  text: string,
  o: { host?: string; status?: number } = {},
): Promise<{ port: number; connections: () => number; close(): void }> {
  let n = 0;
  const srv = createServer((_q, r) => {
    r.statusCode = o.status ?? 200;
    r.end(text);
  });
  srv.on('connection', () => n++);
  await new Promise<void>((r) => srv.listen(0, o.host ?? '127.0.0.1', r));
  return { port: (srv.address() as AddressInfo).port, connections: () => n, close: () => srv.close() };
}

/** The status an upgrade request to `path` is answered with (101 or the refusal's). */
export function upgradeStatus(url: string, path: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url + path, {
      headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', ...headers },
    });
    req.once('upgrade', (res, socket) => {
      socket.destroy();
      resolve(res.statusCode ?? 0);
    });
    req.once('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('error', reject);
    req.end();
  });
}
