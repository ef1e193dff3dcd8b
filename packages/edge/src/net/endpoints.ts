/**
 * Endpoints: targets the operator names (`--endpoint policy=http://10.0.0.5:8000`) that a sandbox
 * whose rules ask for them reaches at `http://policy.warren.internal/`, through the node's egress
 * proxy, each request with the sandbox's token added. The pure parts: parsing, the token, the
 * rewrite of a request head, and the request rate.
 */
import { createHmac } from 'node:crypto';
import { ENDPOINT_DOMAIN, WarrenError } from '@warren/api';

/** The header that carries the sandbox's token to an endpoint (one the sandbox sent is removed). */
export const TOKEN_HEADER = 'X-Warren-Sandbox-Token';
/** The header that carries the sandbox's id to an endpoint (one the sandbox sent is removed). */
export const ID_HEADER = 'X-Warren-Sandbox-Id';

/** An endpoint's target, checked. */
export interface EndpointTarget {
  name: string;
  /** The target's host (an address or a name the node resolves) and port. */
  host: string;
  port: number;
  /** What the request's Host header becomes: the URL's `host[:port]`. */
  hostHeader: string;
}

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/**
 * An endpoint from its name and URL: the name one DNS label, the URL `http://HOST:PORT` (or
 * `http://HOST`, port 80) with no path beyond `/`, no user, query or fragment. Throws with a
 * message for the operator.
 */
export function parseEndpoint(name: string, url: string): EndpointTarget {
  if (!LABEL.test(name)) throw new Error(`endpoint name "${name}" is not one DNS label (1-63 of a-z, 0-9 and inner "-")`);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`endpoint ${name}: "${url}" is not a URL`);
  }
  if (u.protocol !== 'http:') throw new Error(`endpoint ${name}: only http:// targets are supported, not "${u.protocol}"`);
  if (u.username || u.password) throw new Error(`endpoint ${name}: no user or password in the URL`);
  if (u.pathname !== '/' || u.search || u.hash) throw new Error(`endpoint ${name}: the URL names a host and port only, no path, query or fragment`);
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  if (!host) throw new Error(`endpoint ${name}: no host in "${url}"`);
  return { name, host, port: u.port ? Number(u.port) : 80, hostHeader: u.host };
}

/** `NAME=URL`, the form of `--endpoint`. */
export function parseEndpointFlag(spec: string): EndpointTarget {
  const i = spec.indexOf('=');
  if (i < 1) throw new Error(`--endpoint wants NAME=URL (policy=http://10.0.0.5:8000), got "${spec}"`);
  return parseEndpoint(spec.slice(0, i), spec.slice(i + 1));
}

const SUFFIX = `.${ENDPOINT_DOMAIN}`;

/**
 * For a host name (normalised: lowercase, no port or trailing dot): null when it is not under
 * `warren.internal`; else the endpoint it names (`policy.warren.internal` → `policy`), or '' for
 * a name there that names none (the domain itself, deeper names).
 */
export function internalName(name: string): string | null {
  if (name === ENDPOINT_DOMAIN) return '';
  if (!name.endsWith(SUFFIX)) return null;
  const label = name.slice(0, -SUFFIX.length);
  return LABEL.test(label) ? label : '';
}

/** A sandbox's token: hex HMAC-SHA256 of its id under the node's endpoint secret (what an endpoint can check). */
export function sandboxToken(secret: string | Buffer, sandboxId: string): string {
  return createHmac('sha256', secret).update(sandboxId).digest('hex');
}

/** Headers of a request to an endpoint the proxy sets itself (any the sandbox sent are removed). */
const REPLACED = /^(host|connection|proxy-connection|keep-alive|upgrade|x-warren-sandbox-token|x-warren-sandbox-id)[ \t]*:/i;

/**
 * A request head (checked, ending CRLF CRLF) as the endpoint gets it: an absolute-form target
 * made origin-form, Host the target's, the sandbox's id and token added (any the sandbox sent of
 * those headers dropped), and `Connection: close` (one request per connection, as for every
 * name the proxy lets through).
 */
export function endpointHead(head: Buffer, o: { hostHeader: string; sandboxId: string; token: string }): Buffer {
  const lines = head.toString('latin1', 0, head.length - 4).split('\r\n');
  const start = lines[0]!.replace(/^(\S+ )[hH][tT][tT][pP]:\/\/[^/ ]*(\/?)/, (_m, method: string, slash: string) => `${method}${slash || '/'}`);
  const out = [start, `Host: ${o.hostHeader}`];
  for (const l of lines.slice(1)) if (!REPLACED.test(l)) out.push(l);
  out.push(`${ID_HEADER}: ${o.sandboxId}`, `${TOKEN_HEADER}: ${o.token}`, 'Connection: close');
  return Buffer.from(out.join('\r\n') + '\r\n\r\n', 'latin1');
}

/** A token bucket: `perSecond` requests a second after a burst of `burst`. Time is given by the caller (ms). */
export class TokenBucket {
  private tokens: number;
  private at: number;

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    nowMs: number,
  ) {
    this.tokens = burst;
    this.at = nowMs;
  }

  /** Takes one token if there is one (then true). */
  take(nowMs: number): boolean {
    this.tokens = Math.min(this.burst, this.tokens + (Math.max(0, nowMs - this.at) * this.perSecond) / 1000);
    this.at = Math.max(this.at, nowMs);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** How a node's endpoints are set up (EdgeNodeOptions.network.endpoints and its neighbours). */
export interface EndpointsOptions {
  /** Name → `http://HOST:PORT`. */
  targets: Record<string, string>;
  /** The key of the sandboxes' tokens. */
  secret: string | Buffer;
  /** Requests a sandbox may send to one endpoint per second (default 50), after a burst (default twice that). */
  requestsPerSecond?: number;
  requestBurst?: number;
  /** The largest request body a sandbox may send to an endpoint (default 64 MiB). */
  maxRequestBodyBytes?: number;
  /** The clock of the request rate (ms; default performance.now). */
  clock?: () => number;
}

/** A node's endpoints, checked once: what the proxy and the DNS ask of them. */
export class Endpoints {
  readonly targets: ReadonlyMap<string, EndpointTarget>;
  readonly maxRequestBodyBytes: number;
  private readonly perSecond: number;
  private readonly burst: number;
  readonly now: () => number;

  constructor(private readonly o: EndpointsOptions) {
    this.targets = new Map(Object.entries(o.targets).map(([name, url]) => [name, parseEndpoint(name, url)]));
    this.perSecond = o.requestsPerSecond ?? 50;
    this.burst = o.requestBurst ?? 2 * this.perSecond;
    this.maxRequestBodyBytes = o.maxRequestBodyBytes ?? 64 * 2 ** 20;
    this.now = o.clock ?? (() => performance.now());
  }

  /** The endpoints' names, sorted. */
  names(): string[] {
    return [...this.targets.keys()].sort();
  }

  /** The sandbox's token. */
  token(sandboxId: string): string {
    return sandboxToken(this.o.secret, sandboxId);
  }

  /** A new bucket of the node's request rate. */
  bucket(): TokenBucket {
    return new TokenBucket(this.perSecond, this.burst, this.now());
  }

  /** Refuses (invalid_argument, naming it) rules that ask for an endpoint this node does not have. */
  check(names: readonly string[] | undefined): void {
    for (const n of names ?? []) {
      if (!this.targets.has(n))
        throw new WarrenError('invalid_argument', `network.endpoints: "${n}" is not an endpoint of this node`, { endpoint: n, endpoints: this.names() });
    }
  }
}
