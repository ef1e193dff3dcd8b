import { createServer, connect, type Server, type Socket } from 'node:net';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { RCODE, DNS_TYPE, buildAnswer, parseQuery } from './dns.js';
import { MAX_SNIFF_BYTES, sniffHttp, sniffTls, type Sniffed } from './sniff.js';
import { nameAllowed, normalizeHostName, type CompiledPolicy } from './policy.js';
import type { NetCounters } from './counters.js';
import { BodyMeter, checkHead } from './http-framing.js';
import { endpointHead, internalName, type Endpoints, type TokenBucket } from './endpoints.js';

/** What the proxy knows of the sandbox behind a source address. */
export interface EgressTarget {
  id: string;
  policy: CompiledPolicy;
  /** The sandbox's gateway (the host's end of its link): every allowed name resolves to it. */
  gateway: number;
  counters: NetCounters;
  /** Connections it holds open through the proxy now. */
  active: number;
  /** Its request rate to each endpoint, by name (made at its first request). */
  buckets?: Map<string, TokenBucket>;
}

export interface EgressProxyOptions {
  /** The sandbox a source address belongs to (undefined: not a sandbox; dropped). */
  target(sourceIp: string): EgressTarget | undefined;
  /** Where a name the rules allowed is reached (throws when it cannot or may not be). */
  resolve(name: string, policy: CompiledPolicy): Promise<string>;
  maxConnectionsPerSandbox: number;
  /** The operator's endpoints (none: every name under warren.internal is refused). */
  endpoints?: Endpoints;
  /** How long a client may take to send its ClientHello or request head. */
  sniffTimeoutMs?: number;
  connectTimeoutMs?: number;
  logger?: { warn(msg: string, meta?: unknown): void };
}

type Mode = 'http' | 'tls';

/**
 * The node's egress proxy: sandboxes' port 80 and 443 connections are redirected here by the
 * kernel (nftables), and their DNS queries too. A connection is let through only when the name
 * it asks for (HTTP Host, TLS SNI: the proxy never terminates TLS) passes the sandbox's rules;
 * the proxy resolves the name itself, so the address the sandbox aimed at does not matter.
 */
export class EgressProxy {
  private http: Server | null = null;
  private tls: Server | null = null;
  private dns: UdpSocket | null = null;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly o: EgressProxyOptions) {}

  /** Listens on ephemeral ports of every address (the kernel's redirect picks the link's). */
  async listen(): Promise<{ http: number; tls: number; dns: number }> {
    this.http = await this.serve('http');
    this.tls = await this.serve('tls');
    const dns = createSocket({ type: 'udp4' });
    dns.on('message', (msg, from) => this.answer(dns, msg, from.address, from.port));
    dns.on('error', (e) => this.o.logger?.warn('sandbox DNS socket error', { error: String(e) }));
    await new Promise<void>((resolve, reject) => {
      dns.once('error', reject);
      dns.bind(0, '0.0.0.0', () => resolve());
    });
    this.dns = dns;
    return { http: (this.http.address() as AddressInfo).port, tls: (this.tls.address() as AddressInfo).port, dns: dns.address().port };
  }

  private async serve(mode: Mode): Promise<Server> {
    const srv = createServer({ noDelay: true }, (s) => this.accept(s, mode));
    srv.on('error', (e) => this.o.logger?.warn('egress proxy error', { error: String(e) }));
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen({ port: 0, host: '0.0.0.0', backlog: 4096 }, () => resolve());
    });
    return srv;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    for (const s of [this.http, this.tls]) if (s) await new Promise<void>((r) => s.close(() => r()));
    this.dns?.close();
  }

  private answer(sock: UdpSocket, msg: Buffer, from: string, port: number): void {
    const t = this.o.target(from);
    const q = parseQuery(msg);
    if (!t || !q) return;
    let reply: Buffer;
    if ((q.flags & 0x7800) !== 0) reply = buildAnswer(q, RCODE.notimp, null);
    else if (q.name === null) reply = buildAnswer(q, RCODE.refused, null);
    else if (internalName(q.name) !== null) {
      // An endpoint resolves (to the gateway, where the proxy is) only for a sandbox whose rules name it.
      const ok = this.endpointOf(t, q.name) !== null;
      if (!ok) t.counters.deny(q.name);
      reply = buildAnswer(q, ok ? RCODE.ok : RCODE.nxdomain, ok && q.type === DNS_TYPE.A && q.klass === 1 ? t.gateway : null);
    } else if (!nameAllowed(t.policy, q.name)) {
      t.counters.deny(q.name);
      reply = buildAnswer(q, RCODE.nxdomain, null);
    } else reply = buildAnswer(q, RCODE.ok, q.type === DNS_TYPE.A && q.klass === 1 ? t.gateway : null);
    sock.send(reply, port, from);
  }

  private accept(client: Socket, mode: Mode): void {
    const t = this.o.target(client.remoteAddress ?? '');
    if (!t) return void client.destroy();
    this.sockets.add(client);
    client.on('error', () => undefined);
    client.once('close', () => this.sockets.delete(client));
    if (t.active >= this.o.maxConnectionsPerSandbox) {
      t.counters.deny('(connection limit)');
      return void client.destroy();
    }
    t.active++;
    client.once('close', () => t.active--);
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => client.destroy(), this.o.sniffTimeoutMs ?? 10_000);
    const onData = (d: Buffer): void => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      const s: Sniffed = mode === 'tls' ? sniffTls(buf) : sniffHttp(buf);
      if (s.kind === 'need' && buf.length < MAX_SNIFF_BYTES) return;
      client.off('data', onData);
      client.pause();
      clearTimeout(timer);
      this.decide(client, mode, t, s, buf);
    };
    client.on('data', onData);
    client.once('close', () => clearTimeout(timer));
  }

  private decide(client: Socket, mode: Mode, t: EgressTarget, s: Sniffed, head: Buffer): void {
    const raw = s.kind === 'name' ? s.name : null;
    const name = raw === null ? null : normalizeHostName(raw);
    if (name !== null && internalName(name) !== null) return this.toEndpoint(client, mode, t, name, head);
    if (name === null || !nameAllowed(t.policy, name)) {
      t.counters.deny(name ?? (raw ? raw.slice(0, 64).toLowerCase() : s.kind === 'bad' ? '(not HTTP or TLS)' : '(no name)'));
      if (mode === 'http' && s.kind !== 'bad') {
        const why =
          name === null ? 'a request without a host name (or with an address) is not allowed' : `${name} is not allowed by this sandbox's network rules`;
        refuse(client, 403, why);
      } else client.destroy();
      return;
    }
    // One request per connection, enforced here rather than trusted to the upstream: the head is
    // read strictly, its body counted off, and nothing after it forwarded, so a second request
    // on the connection never reaches another virtual host.
    let meter: BodyMeter | null = null;
    let first = head;
    if (mode === 'http') {
      const h = checkHead(head);
      if (!h.ok) {
        t.counters.deny(`${name} (malformed request)`);
        return refuse(client, 400, `the request was refused: ${h.why}`);
      }
      meter = new BodyMeter(h.framing);
      first = Buffer.concat([closeAfterOne(head.subarray(0, h.headBytes)), meter.take(head.subarray(h.headBytes))]);
      if (meter.error) {
        t.counters.deny(`${name} (malformed request)`);
        return refuse(client, 400, `the request was refused: ${meter.error}`);
      }
    }
    t.counters.allow(name);
    this.o.resolve(name, t.policy).then(
      (address) => this.pipe(client, t, address, mode === 'tls' ? 443 : 80, first, meter),
      (e: unknown) => {
        this.o.logger?.warn('egress: name not reachable', { sandbox: t.id, name, error: String(e) });
        if (mode === 'http') client.end('HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
        else client.destroy();
      },
    );
  }

  /** The endpoint a name under warren.internal names, if the sandbox's rules ask for it and the node has it. */
  private endpointOf(t: EgressTarget, name: string): string | null {
    const e = internalName(name);
    return e && t.policy.endpoints.has(e) && this.o.endpoints?.targets.has(e) ? e : null;
  }

  /**
   * A request to an endpoint: plain HTTP only, one of the sandbox's endpoints, within its rate
   * and the body bound; its head rewritten (Host, the sandbox's id and token), its body counted
   * off, the response piped back as it comes (streamed tokens are not held).
   */
  private toEndpoint(client: Socket, mode: Mode, t: EgressTarget, name: string, head: Buffer): void {
    const e = this.endpointOf(t, name);
    const eps = this.o.endpoints;
    if (mode === 'tls' || e === null || !eps) {
      t.counters.deny(name);
      if (mode === 'tls') return void client.destroy();
      return refuse(client, 403, `${name} is not an endpoint of this sandbox`);
    }
    const h = checkHead(head);
    if (!h.ok) {
      t.counters.deny(`${name} (malformed request)`);
      return refuse(client, 400, `the request was refused: ${h.why}`);
    }
    if (h.framing.kind === 'length' && h.framing.bytes > eps.maxRequestBodyBytes) {
      t.counters.deny(`${name} (request too large)`);
      return refuse(client, 413, `a request body to an endpoint is at most ${eps.maxRequestBodyBytes} bytes`);
    }
    const buckets = (t.buckets ??= new Map<string, TokenBucket>());
    let bucket = buckets.get(e);
    if (!bucket) buckets.set(e, (bucket = eps.bucket()));
    if (!bucket.take(eps.now())) {
      t.counters.deny(`${name} (request rate)`);
      return refuse(client, 429, `too many requests to ${name}: wait and try again`);
    }
    const target = eps.targets.get(e)!;
    const meter = new BodyMeter(h.framing, { noTrailers: true });
    const body = meter.take(head.subarray(h.headBytes));
    if (meter.error) {
      t.counters.deny(`${name} (malformed request)`);
      return refuse(client, 400, `the request was refused: ${meter.error}`);
    }
    if (body.length > eps.maxRequestBodyBytes) {
      t.counters.deny(`${name} (request too large)`);
      return refuse(client, 413, `a request body to an endpoint is at most ${eps.maxRequestBodyBytes} bytes`);
    }
    const first = Buffer.concat([
      endpointHead(head.subarray(0, h.headBytes), { hostHeader: target.hostHeader, sandboxId: t.id, token: eps.token(t.id) }),
      body,
    ]);
    t.counters.allow(name);
    this.pipe(client, t, target.host, target.port, first, meter, { maxBytes: eps.maxRequestBodyBytes, sentBytes: body.length });
  }

  /**
   * Joins the client to its upstream; with a meter, only the first request's bytes go up (with
   * `bound`, at most `maxBytes` of its body, `sentBytes` of it in `first`: past that both ends close).
   */
  private pipe(
    client: Socket,
    t: EgressTarget,
    address: string,
    port: number,
    first: Buffer,
    meter: BodyMeter | null,
    bound?: { maxBytes: number; sentBytes: number },
  ): void {
    if (client.destroyed) return;
    const up = connect({ host: address, port, noDelay: true });
    this.sockets.add(up);
    const timer = setTimeout(() => up.destroy(), this.o.connectTimeoutMs ?? 10_000);
    up.once('connect', () => clearTimeout(timer));
    up.on('error', () => client.destroy());
    client.on('error', () => up.destroy());
    up.once('close', () => {
      clearTimeout(timer);
      this.sockets.delete(up);
      client.destroySoon();
    });
    client.once('close', () => up.destroy());
    up.write(first);
    up.pipe(client);
    if (!meter) client.pipe(up);
    else {
      let bodyBytes = bound?.sentBytes ?? 0;
      client.on('data', (d: Buffer) => {
        const body = meter.take(d);
        if (meter.error) {
          this.o.logger?.warn('egress: malformed request body', { sandbox: t.id, why: meter.error });
          client.destroy();
          return;
        }
        bodyBytes += body.length;
        if (bound && bodyBytes > bound.maxBytes) {
          t.counters.deny('(request too large)');
          client.destroy();
          return;
        }
        // What follows the request is read and dropped: the client may keep sending, nothing goes up.
        if (body.length && !up.write(body)) {
          client.pause();
          up.once('drain', () => client.resume());
        }
      });
      client.once('end', () => up.end());
    }
    client.resume();
  }
}

const STATUS_TEXT = { 400: 'Bad Request', 403: 'Forbidden', 413: 'Content Too Large', 429: 'Too Many Requests' } as const;

function refuse(client: Socket, status: keyof typeof STATUS_TEXT, why: string): void {
  const retry = status === 429 ? 'Retry-After: 1\r\n' : '';
  client.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status]}\r\nContent-Type: text/plain\r\n${retry}Content-Length: ${why.length + 1}\r\nConnection: close\r\n\r\n${why}\n`,
  );
}

/** A request head (ending CRLF CRLF, checked) with `Connection: close` in place of any connection headers. */
export function closeAfterOne(head: Buffer): Buffer {
  const lines = head
    .toString('latin1', 0, head.length - 4)
    .split('\r\n')
    .filter((l, i) => i === 0 || !/^(connection|proxy-connection|keep-alive|upgrade)[ \t]*:/i.test(l));
  lines.push('Connection: close');
  return Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1');
}
