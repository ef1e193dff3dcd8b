import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { WarrenError, parseError, type JoinNodeRequest, type JoinNodeResponse } from '@warren/api';
import type { EdgeLoad } from '../edge-api/edge-api.js';
import type { Logger } from '../util/logger.js';

/** What an edge joins a control plane with (see JoinClient). */
export interface JoinClientOptions {
  /** The control plane's URL (any replica, or the load balancer in front of them). */
  url: string;
  /** The cluster's join token. */
  token: string;
  /** What the edge says of itself: name, where its edge protocol listens, its token there, its boot. */
  node: JoinNodeRequest;
  /** The edge's load now (each heartbeat carries it). */
  load: () => Promise<EdgeLoad>;
  /** Called after each join (the first and every later one, after a down or a restart of a replica). */
  onJoined?: (r: JoinNodeResponse) => void | Promise<void>;
  /** How long to wait before trying again after a failed join (ms; default 1000). */
  retryMs?: number;
  logger: Logger;
}

/**
 * An edge's side of the cluster: joins, then sends a heartbeat every `heartbeatMs` the control
 * plane asked for; joins again when a heartbeat is refused (the node was marked down, or the
 * control plane forgot it). A control plane that cannot be reached is tried again and again: the
 * edge and its sandboxes run on meanwhile.
 */
export class JoinClient {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private joined: JoinNodeResponse | null = null;
  private busy = false;
  /** One connection kept open for the heartbeats (a new one per call costs both ends a handshake every second). */
  private readonly agent: HttpAgent;

  constructor(private readonly o: JoinClientOptions) {
    this.agent = new URL(o.url).protocol === 'https:' ? new HttpsAgent({ keepAlive: true, maxSockets: 2 }) : new HttpAgent({ keepAlive: true, maxSockets: 2 });
  }

  /** Resolves after the first join (tried every `retryMs` until it works or the client stops). */
  async start(): Promise<JoinNodeResponse> {
    for (;;) {
      try {
        const r = await this.join();
        this.schedule(r.heartbeatMs);
        return r;
      } catch (e) {
        if (this.stopped) throw e;
        // A refusal that another try cannot change (a bad token, a duplicate name) ends it.
        if (e instanceof WarrenError && (e.code === 'unauthenticated' || e.code === 'permission_denied' || e.code === 'invalid_argument')) throw e;
        this.o.logger.warn('could not join the cluster; trying again', { url: this.o.url, error: String(e) });
        await new Promise((r) => setTimeout(r, this.o.retryMs ?? 1000));
      }
    }
  }

  private async join(): Promise<JoinNodeResponse> {
    const r = (await this.call('/v1/nodes/join', this.o.node)) as JoinNodeResponse;
    this.joined = r;
    this.o.logger.info('joined the cluster', { url: this.o.url, node: r.node, reconciled: r.reconciled });
    await this.o.onJoined?.(r);
    return r;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setInterval(() => void this.beat(), ms);
    this.timer.unref();
  }

  /** One heartbeat (skipped while one is in flight); a refused one joins again. */
  private async beat(): Promise<void> {
    if (this.busy || this.stopped) return;
    this.busy = true;
    try {
      const load = await this.o.load();
      await this.call(`/v1/nodes/${encodeURIComponent(this.o.node.name)}/heartbeat`, { boot: this.o.node.boot, load });
    } catch (e) {
      if (e instanceof WarrenError && e.code === 'conflict' && !this.stopped) {
        this.o.logger.warn('the control plane asks this node to join again', { error: e.message });
        await this.join().catch((err: unknown) => this.o.logger.warn('could not join the cluster again', { error: String(err) }));
      } else this.o.logger.warn('a heartbeat failed', { error: String(e) });
    } finally {
      this.busy = false;
    }
  }

  /** POSTs JSON with the join token (a minute at most); the API's error as a WarrenError. */
  private call(path: string, body: unknown): Promise<unknown> {
    const url = new URL(path, this.o.url);
    const data = JSON.stringify(body);
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(url, {
        method: 'POST',
        agent: this.agent,
        timeout: 60_000,
        headers: { authorization: `Bearer ${this.o.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      });
      req.once('timeout', () => req.destroy(new WarrenError('unavailable', `the control plane did not answer ${url.pathname} within a minute`)));
      req.once('error', (e) =>
        reject(e instanceof WarrenError ? e : new WarrenError('unavailable', `the control plane cannot be reached: ${e.message}`, {}, { cause: e })),
      );
      req.once('response', (res) => {
        const parts: Buffer[] = [];
        let size = 0;
        res.on('data', (d: Buffer) => {
          size += d.length;
          // A join's answer lists what was reconciled; more than this is not a control plane.
          if (size > 64 << 20) req.destroy(new WarrenError('unavailable', 'the control plane’s answer is too large'));
          else parts.push(d);
        });
        res.once('error', reject);
        res.once('end', () => {
          try {
            const text = Buffer.concat(parts).toString('utf8');
            const json = text ? (JSON.parse(text) as unknown) : undefined;
            if ((res.statusCode ?? 500) >= 300) reject(parseError(res.statusCode ?? 500, json ?? {}));
            else resolve(json);
          } catch {
            reject(new WarrenError('unavailable', `the control plane answered ${res.statusCode} with a body that is not JSON`));
          }
        });
      });
      req.end(data);
    });
  }

  /** The last join's answer (null before the first). */
  get last(): JoinNodeResponse | null {
    return this.joined;
  }

  /** Stops the heartbeats and any join being retried; the open connection is let go. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.agent.destroy();
  }
}
