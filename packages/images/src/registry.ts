import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { WarrenError } from '@warren/api';
import type { IdMap } from './idmap.js';
import type { ImageCatalogue } from './image-catalogue.js';
import type { FsOps } from './unpack.js';
import { gunzipIfCompressed } from './gzip.js';
import { configEnv, type ImageConfigDoc } from './image-config.js';

/** A parsed image reference: registry host, repository, and tag or digest. */
export interface ImageRef {
  registry: string;
  repository: string;
  reference: string;
}

/**
 * Parses `host[:port]/path/name[:tag|@sha256:…]`. A first component without a dot or colon
 * (and not `localhost`) is a Docker Hub path, as docker reads it.
 */
export function parseImageRef(ref: string): ImageRef {
  const m =
    /^(?:([^/]+)\/)?([a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)(?::([A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(sha256:[0-9a-f]{64}))?$/.exec(
      ref,
    );
  if (!m) throw new WarrenError('invalid_argument', `not an image reference: ${ref}`);
  let [, host, path] = m;
  if (host && !/[.:]/.test(host) && host !== 'localhost') {
    path = `${host}/${path}`;
    host = undefined;
  }
  const registry = host ?? 'registry-1.docker.io';
  const repository = !host && !path?.includes('/') ? `library/${path}` : (path ?? '');
  return { registry, repository, reference: m[4] ?? m[3] ?? 'latest' };
}

const MANIFEST_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');

interface Descriptor {
  mediaType?: string;
  digest: string;
  size?: number;
  platform?: { os?: string; architecture?: string };
}

/** A response body, refused once it passes `max` bytes (a registry is not trusted with memory). */
export async function readCapped(res: Response, max: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of (res.body ?? []) as AsyncIterable<Uint8Array>) {
    n += c.length;
    if (n > max) {
      await res.body?.cancel().catch(() => undefined);
      throw new WarrenError('invalid_argument', `${what} is larger than ${max} bytes`);
    }
    chunks.push(Buffer.from(c));
  }
  return Buffer.concat(chunks);
}

const sha256 = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** A user name and password for a registry (Basic auth, or to get bearer tokens with). */
export interface RegistryCredentials {
  username: string;
  password: string;
}

/** `Authorization` for Basic auth with these credentials. */
export function basicAuth(c: RegistryCredentials): string {
  return `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;
}

/** A minimal OCI distribution client: manifests and blobs; Basic auth and bearer tokens. */
export class RegistryClient {
  /** The `Authorization` the registry asked for, once it has. */
  private auth: string | null = null;

  constructor(
    readonly ref: ImageRef,
    private readonly fetchFn: typeof fetch = fetch,
    /** Plain HTTP whatever the host (loopback hosts always are). */
    private readonly plainHttp = false,
    private readonly credentials?: RegistryCredentials,
    /** Hosts a token service (a challenge's realm) may be on, besides the registry's own; absent: any. */
    private readonly allowHost?: (host: string) => boolean,
  ) {}

  private base(): string {
    const plain = this.plainHttp || /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/.test(this.ref.registry);
    return `${plain ? 'http' : 'https'}://${this.ref.registry}/v2/${this.ref.repository}`;
  }

  /** Where the repository's blobs are read: `<blobsUrl><digest>`. */
  get blobsUrl(): string {
    return `${this.base()}/blobs/`;
  }

  private async request(
    method: string,
    path: string,
    o: { accept?: string; body?: string | Uint8Array | Readable; headers?: Record<string, string>; ok?: number[] } = {},
  ): Promise<Response> {
    const url = /^https?:/.test(path) ? path : `${this.base()}${path}`;
    const go = (): Promise<Response> =>
      this.fetchFn(url, {
        method,
        headers: { ...o.headers, ...(o.accept ? { accept: o.accept } : {}), ...(this.auth ? { authorization: this.auth } : {}) },
        ...(o.body !== undefined ? { body: o.body, duplex: 'half' } : {}),
        redirect: method === 'GET' || method === 'HEAD' ? 'follow' : 'manual',
      } as RequestInit).catch((e: unknown) => {
        throw new WarrenError(
          'unavailable',
          `the registry ${this.ref.registry} cannot be reached: ${(e as Error).cause instanceof Error ? ((e as Error).cause as Error).message : String(e)}`,
        );
      });
    let res = await go();
    // A streamed body cannot be sent twice: those requests come after a small one got the token.
    if (res.status === 401 && !this.auth && !(o.body instanceof Readable)) {
      await res.body?.cancel();
      this.auth = await this.authorize(res.headers.get('www-authenticate') ?? '');
      res = await go();
    }
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel();
      throw new WarrenError(
        'permission_denied',
        `the registry ${this.ref.registry} refused ${this.credentials ? 'the credentials' : 'an anonymous client'} (${res.status})`,
      );
    }
    if ((o.ok ?? []).includes(res.status)) return res;
    if (res.status === 404) {
      await res.body?.cancel();
      throw new WarrenError('not_found', `${this.ref.registry}/${this.ref.repository}: ${path.split('?')[0]?.split('/').pop()} not found in the registry`);
    }
    if (!res.ok) {
      // What failed, never what it said: the body of an answer is the registry's (or whatever
      // answers at that address), not for the caller to read.
      await res.body?.cancel();
      throw new WarrenError(
        'unavailable',
        `the registry ${this.ref.registry} answered ${res.status} to ${method} ${path.split('?')[0]?.replace(/^https?:\/\/[^/]+/, '')}`,
      );
    }
    return res;
  }

  private get(path: string, accept?: string): Promise<Response> {
    return this.request('GET', path, { accept });
  }

  /** Whether the repository has a blob. */
  async hasBlob(digest: string): Promise<boolean> {
    const res = await this.request('HEAD', `/blobs/${digest}`, { ok: [404] });
    return res.status !== 404;
  }

  /** Uploads a blob in one request (the registry checks it against `digest`). */
  async pushBlob(digest: string, size: number, body: () => AsyncIterable<Buffer>): Promise<void> {
    const start = await this.request('POST', '/blobs/uploads/', { body: '', headers: { 'content-length': '0' }, ok: [202] });
    await start.body?.cancel();
    const loc = start.headers.get('location');
    if (!loc) throw new WarrenError('unavailable', 'the registry gave no upload location');
    const url = new URL(loc, this.blobsUrl);
    url.searchParams.set('digest', digest);
    const res = await this.request('PUT', url.toString(), {
      body: Readable.from(body()),
      headers: { 'content-type': 'application/octet-stream', 'content-length': String(size) },
      ok: [201],
    });
    await res.body?.cancel();
  }

  /** Stores a manifest under a tag. */
  async putManifest(tag: string, manifest: Buffer, mediaType: string): Promise<void> {
    const res = await this.request('PUT', `/manifests/${tag}`, { body: manifest, headers: { 'content-type': mediaType }, ok: [201] });
    await res.body?.cancel();
  }

  /** Answers a challenge: Basic with the credentials, or a bearer token (anonymous without them). */
  private async authorize(challenge: string): Promise<string> {
    if (/^Basic /i.test(challenge)) {
      if (!this.credentials) throw new WarrenError('permission_denied', `the registry ${this.ref.registry} wants credentials`);
      return basicAuth(this.credentials);
    }
    const params: Record<string, string | undefined> = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1] ?? '', m[2] ?? '']));
    if (!/^Bearer /i.test(challenge) || !params.realm) throw new WarrenError('permission_denied', `the registry ${this.ref.registry} wants credentials`);
    const u = new URL(params.realm);
    if (!/^https?:$/.test(u.protocol) || (this.allowHost && u.host !== this.ref.registry && !this.allowHost(u.host)))
      throw new WarrenError('permission_denied', `the registry ${this.ref.registry} sends its clients for tokens to ${u.host}, which this node may not reach`);
    if (params.service) u.searchParams.set('service', params.service);
    u.searchParams.set('scope', params.scope ?? `repository:${this.ref.repository}:pull`);
    const res = await this.fetchFn(u, this.credentials ? { headers: { authorization: basicAuth(this.credentials) } } : {}).catch(() => null);
    const body = res?.ok ? ((await res.json()) as { token?: string; access_token?: string }) : null;
    const token = body?.token ?? body?.access_token;
    if (!token) throw new WarrenError('permission_denied', `no ${this.credentials ? '' : 'anonymous '}token from ${u.host}`);
    return `Bearer ${token}`;
  }

  /** A manifest or index by tag or digest, checked against the digest when given one. */
  async manifest(reference: string): Promise<{ doc: { manifests?: Descriptor[]; layers?: Descriptor[]; config?: Descriptor }; digest: string }> {
    const res = await this.get(`/manifests/${reference}`, MANIFEST_TYPES);
    const bytes = await readCapped(res, 4 << 20, `manifest ${reference}`);
    const digest = sha256(bytes);
    if (reference.startsWith('sha256:') && digest !== reference)
      throw new WarrenError('invalid_argument', `manifest ${reference} does not match its digest (${digest})`);
    try {
      return { doc: JSON.parse(bytes.toString('utf8')) as never, digest };
    } catch {
      throw new WarrenError('invalid_argument', `the registry's manifest for ${reference} is not JSON`);
    }
  }

  async blobBytes(digest: string, max = 16 << 20): Promise<Buffer> {
    const res = await this.get(`/blobs/${digest}`);
    const b = await readCapped(res, max, `blob ${digest}`);
    if (sha256(b) !== digest) throw new WarrenError('invalid_argument', `blob ${digest} does not match its digest`);
    return b;
  }

  /** A blob as a stream, hashed as it goes; `digest()` once read through. */
  async blobStream(digest: string): Promise<{ stream: AsyncIterable<Buffer>; digest: () => string }> {
    const res = await this.get(`/blobs/${digest}`);
    const h = createHash('sha256');
    const body = res.body;
    return {
      stream: (async function* () {
        if (!body) return;
        for await (const c of body as unknown as AsyncIterable<Uint8Array>) {
          const b = Buffer.from(c);
          h.update(b);
          yield b;
        }
      })(),
      digest: () => `sha256:${h.digest('hex')}`,
    };
  }
}

/**
 * Pulls an image from an OCI registry into the store: the manifest (linux/amd64 from an index),
 * its config's diffIDs, then each layer not converted before, streamed and checked against
 * both digests. Returns the layer digests, bottom first, pinned, and the image's environment.
 */
export async function pullImage(
  ref: string,
  store: ImageCatalogue,
  o: {
    idMap: IdMap;
    ops: FsOps;
    fetch?: typeof fetch;
    credentials?: RegistryCredentials;
    onProgress?: (ev: { phase: 'layer'; layer: number; layers: number; bytes: number }) => void;
    /** Who pulls (undefined: an admin): a layer converted before is skipped only if it may use it (see importArchive). */
    tenant?: string;
    /** Hosts a registry's token service may be on (absent: any); see RegistryClient. */
    allowHost?: (host: string) => boolean;
    /** The most bytes a layer may unpack to (payload_too_large past it). */
    maxBytes?: number;
  },
): Promise<{ digests: string[]; env: Record<string, string> }> {
  const client = new RegistryClient(parseImageRef(ref), o.fetch, false, o.credentials, o.allowHost);
  let { doc } = await client.manifest(client.ref.reference);
  if (doc.manifests) {
    const pick = doc.manifests.find((d) => d.platform?.os === 'linux' && d.platform.architecture === 'amd64') ?? doc.manifests[0];
    if (!pick) throw new WarrenError('invalid_argument', `${ref}: the index lists no manifests`);
    doc = (await client.manifest(pick.digest)).doc;
  }
  if (!doc.config || !doc.layers?.length) throw new WarrenError('invalid_argument', `${ref}: the manifest lists no layers`);
  const config = JSON.parse((await client.blobBytes(doc.config.digest)).toString('utf8')) as ImageConfigDoc;
  const diffIds = config.rootfs?.diff_ids ?? [];
  const env = configEnv(config);
  const digests: string[] = [];
  try {
    for (const [i, l] of doc.layers.entries()) {
      if (l.mediaType?.includes('zstd')) throw new WarrenError('invalid_argument', `layer ${l.digest} is zstd-compressed, which is not supported`);
      const diffId = diffIds[i];
      const known = diffId ? await store.pinKnownLayer(diffId, o.tenant) : undefined;
      if (known) {
        digests.push(known);
      } else {
        const blob = await client.blobStream(l.digest);
        const info = await store.addLayerTar(gunzipIfCompressed(blob.stream, `layer ${l.digest}`), {
          idMap: o.idMap,
          ops: o.ops,
          expectDiffId: diffId,
          maxBytes: o.maxBytes,
        });
        digests.push(info.digest);
        if (blob.digest() !== l.digest) throw new WarrenError('invalid_argument', `layer ${l.digest} does not match its digest (${blob.digest()})`);
      }
      o.onProgress?.({ phase: 'layer', layer: i + 1, layers: doc.layers.length, bytes: l.size ?? 0 });
    }
    return { digests, env };
  } catch (e) {
    for (const d of digests) store.unpin(d);
    throw e;
  }
}
