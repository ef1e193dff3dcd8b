import type { CreateKeyRequest, Image, Info, ListSandboxesResponse, Sandbox as SandboxInfo, SandboxState } from '@warren/api';
import { Sandbox, type CreateOptions } from './sandbox.js';
import { Transport, type ClientOptions } from './transport.js';

export interface ListOptions {
  labels?: Record<string, string>;
  state?: SandboxState;
  limit?: number;
  cursor?: string;
}

/**
 * The Warren client.
 * @example
 * const warren = connect(); // WARREN_URL, WARREN_API_KEY
 * const sb = await warren.sandboxes.create({ image: 'debian-python:latest' });
 * const { stdout } = await sb.exec('python3 -c "print(6*7)"');
 * await sb.delete();
 */
export class Warren {
  readonly sandboxes: Sandboxes;
  private readonly t: Transport;

  constructor(opts: ClientOptions) {
    this.t = new Transport(opts);
    this.sandboxes = new Sandboxes(this.t);
  }

  async images(): Promise<Image[]> {
    return (await this.t.json<{ images: Image[] }>('GET', '/v1/images')).images;
  }

  info(): Promise<Info> {
    return this.t.json<Info>('GET', '/v1/info');
  }

  /** Creates an API key for a tenant (admin keys only); the key is shown once. */
  async createKey(req: CreateKeyRequest): Promise<string> {
    return (await this.t.json<{ key: string }>('POST', '/v1/keys', { json: req })).key;
  }
}

export class Sandboxes {
  constructor(private readonly t: Transport) {}

  async create(opts: CreateOptions): Promise<Sandbox> {
    return new Sandbox(this.t, await this.t.json<SandboxInfo>('POST', '/v1/sandboxes', { json: opts }));
  }

  /** Creates `count` sandboxes from one template; failures are returned, not thrown. */
  async createMany(count: number, template: CreateOptions): Promise<{ sandboxes: Sandbox[]; errors: Array<{ code: string; message: string }> }> {
    const r = await this.t.json<{ sandboxes: SandboxInfo[]; errors: Array<{ code: string; message: string }> }>('POST', '/v1/sandboxes/batch', {
      json: { count, template },
    });
    return { sandboxes: r.sandboxes.map((s) => new Sandbox(this.t, s)), errors: r.errors };
  }

  /** Reconnects to a sandbox by id (from any process). */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.t, await this.t.json<SandboxInfo>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`));
  }

  async list(opts: ListOptions = {}): Promise<{ sandboxes: Sandbox[]; nextCursor: string | null }> {
    const label = Object.entries(opts.labels ?? {}).map(([k, v]) => `${k}=${v}`);
    const r = await this.t.json<ListSandboxesResponse>('GET', '/v1/sandboxes', { query: { label, state: opts.state, limit: opts.limit, cursor: opts.cursor } });
    return { sandboxes: r.sandboxes.map((s) => new Sandbox(this.t, s)), nextCursor: r.nextCursor };
  }

  /** Pauses, resumes or deletes every sandbox with all these labels; returns how many. */
  async batch(op: 'pause' | 'resume' | 'delete', labels: Record<string, string>): Promise<number> {
    return (await this.t.json<{ count: number }>('POST', `/v1/batch/${op}`, { json: { labels } })).count;
  }
}

/** A client from explicit options, falling back to WARREN_URL and WARREN_API_KEY. */
export function connect(opts: Partial<ClientOptions> = {}, env: Record<string, string | undefined> = process.env): Warren {
  const url = opts.url ?? env.WARREN_URL ?? 'http://127.0.0.1:7070';
  const apiKey = opts.apiKey ?? env.WARREN_API_KEY ?? '';
  return new Warren({ ...opts, url, apiKey });
}
