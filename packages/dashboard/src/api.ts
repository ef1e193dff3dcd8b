// The dashboard's calls: the public API with the key the person logged in with, kept for this
// tab only (sessionStorage). No private endpoint: what it shows is what the key may see.
import type { CommandInfo, ExecResult, LifecycleEvent, ListNodesResponse, ListSandboxesResponse, ListedImage, Sandbox } from '@warren/api';

export type { CommandInfo, ExecResult, LifecycleEvent, ListedImage, Sandbox };
/** A node as GET /v1/nodes answers it. */
export type Node = ListNodesResponse['nodes'][number];

const KEY = 'warren.key';

/** An API error as the server answered it (code and message), or the server out of reach. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function getKey(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(KEY);
  else sessionStorage.setItem(KEY, key);
}

/** Told when a call answers unauthenticated: the key was revoked or is wrong (the app logs out). */
let onUnauthenticated: (message: string) => void = () => undefined;
export function whenUnauthenticated(f: (message: string) => void): void {
  onUnauthenticated = f;
}

/**
 * One request with the key: its answer when it is a success, else ApiError with the server's
 * code (an unauthenticated answer to the key in use logs the tab out). `body`: JSON, or bytes.
 */
async function request(
  method: string,
  path: string,
  o: { body?: unknown; accept?: string; key?: string | null; signal?: AbortSignal } = {},
): Promise<Response> {
  const key = o.key === undefined ? getKey() : o.key;
  const bytes = o.body instanceof Blob;
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      signal: o.signal,
      headers: {
        authorization: `Bearer ${key ?? ''}`,
        ...(o.accept ? { accept: o.accept } : {}),
        ...(o.body === undefined ? {} : { 'content-type': bytes ? 'application/octet-stream' : 'application/json' }),
      },
      body: o.body === undefined ? undefined : bytes ? (o.body as Blob) : JSON.stringify(o.body),
    });
  } catch (e) {
    if (o.signal?.aborted) throw e;
    throw new ApiError(0, 'unavailable', 'the server cannot be reached (it may be restarting): try again in a moment');
  }
  if (res.ok) return res;
  const e = ((await res.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null)?.error;
  const err = new ApiError(res.status, e?.code ?? 'unavailable', e?.message ?? `the server answered ${res.status}`);
  if (err.code === 'unauthenticated' && key === getKey()) onUnauthenticated(err.message);
  throw err;
}

/** One call: JSON in and out; errors as ApiError with the server's code. */
export async function call<T>(method: string, path: string, body?: unknown, key: string | null = getKey()): Promise<T> {
  const res = await request(method, path, { body, accept: 'application/json', key });
  return (res.status === 204 ? undefined : await res.json()) as T;
}

/** A call whose body and answer are bytes (a file's): the answer's body, or ApiError. */
export async function callBytes(method: string, path: string, body?: Blob): Promise<Blob> {
  return (await request(method, path, { body })).blob();
}

/** The most of a command's output the page keeps (the rest is dropped from the front). */
export const MAX_SHOWN_OUTPUT = 1024 * 1024;

/**
 * A call that answers NDJSON events (a command run or re-read): each event as it comes, until the
 * stream ends or `signal` aborts it. Errors as ApiError.
 */
export async function streamEvents<E>(method: string, path: string, body: unknown, onEvent: (e: E) => void, signal?: AbortSignal): Promise<void> {
  let res: Response;
  try {
    res = await request(method, path, { body, accept: 'application/x-ndjson', signal });
  } catch (e) {
    if (signal?.aborted) return;
    throw e;
  }
  if (!res.body) throw new ApiError(res.status, 'unavailable', 'the server answered no stream');
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += value;
      let nl: number;
      while ((nl = rest.indexOf('\n')) >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        if (line.trim()) onEvent(JSON.parse(line) as E);
      }
    }
  } catch (e) {
    if (!signal?.aborted) throw e;
  }
}

/** Whether a key is one the server knows: a list of one sandbox (any tenant's key may). */
export async function checkKey(key: string): Promise<void> {
  await call<ListSandboxesResponse>('GET', '/v1/sandboxes?limit=1', undefined, key);
}

/**
 * Every sandbox the key sees, page by page (100, then 1,000 a page), up to `max`; filters the server takes.
 * `onPage` is told what has come so far after each page (the list shows the first page at once).
 */
export async function listSandboxes(
  q: { state?: string; label?: string; image?: string },
  max = 20_000,
  onPage?: (sofar: Sandbox[]) => void,
): Promise<Sandbox[]> {
  const out: Sandbox[] = [];
  let cursor: string | null = null;
  do {
    // A small first page: the first rows show before the rest is read.
    const p = new URLSearchParams({ limit: out.length === 0 ? '100' : '1000' });
    if (q.state) p.set('state', q.state);
    if (q.label) p.set('label', q.label);
    if (q.image) p.set('image', q.image);
    if (cursor) p.set('cursor', cursor);
    const page: ListSandboxesResponse = await call<ListSandboxesResponse>('GET', `/v1/sandboxes?${p.toString()}`);
    out.push(...page.sandboxes);
    cursor = page.nextCursor;
    if (cursor) onPage?.([...out]);
  } while (cursor && out.length < max);
  return out;
}

export const sandboxPath = (id: string): string => `/v1/sandboxes/${encodeURIComponent(id)}`;

/** Runs `f` over `items`, `limit` at a time; the errors, by item. */
export async function eachLimit<T>(items: T[], limit: number, f: (x: T) => Promise<unknown>): Promise<Array<{ item: T; error: string }>> {
  const errors: Array<{ item: T; error: string }> = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++]!;
      await f(item).catch((e: unknown) => errors.push({ item, error: e instanceof Error ? e.message : String(e) }));
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return errors;
}
