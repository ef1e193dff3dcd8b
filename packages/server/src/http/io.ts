import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, serializeError, type z } from '@warren/api';

/**
 * Reads a request body up to `maxBytes`; payload_too_large past it (the rest is not read: the
 * answer closes the connection). Events, not async iteration: every create's hot path.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const tooLarge = (): WarrenError => new WarrenError('payload_too_large', `body is larger than ${maxBytes} bytes`, { maxBytes });
  const declared = Number(req.headers['content-length'] ?? -1);
  if (declared > maxBytes) return Promise.reject(tooLarge());
  if (req.readableEnded) return Promise.resolve(Buffer.alloc(0));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (b: Buffer): void => {
      size += b.length;
      if (size > maxBytes) {
        done();
        req.pause();
        reject(tooLarge());
      } else chunks.push(b);
    };
    const onEnd = (): void => {
      done();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    };
    const onError = (e: Error): void => {
      done();
      reject(e);
    };
    const onClose = (): void => {
      if (req.complete) return;
      done();
      reject(new WarrenError('invalid_argument', 'the request body was cut off'));
    };
    const done = (): void => {
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}

/** Turns zod issues into one readable invalid_argument. */
export function invalid(error: z.ZodError, where: string): WarrenError {
  const issues = error.issues.slice(0, 10).map((i) => ({ path: i.path.join('.'), message: i.message }));
  const first = issues[0];
  const msg = first ? `${where}: ${first.path ? `${first.path}: ` : ''}${first.message}` : `${where} is invalid`;
  return new WarrenError('invalid_argument', msg, { issues });
}

/** Parses and validates a JSON body with a schema. */
export async function jsonBody<T extends z.ZodType>(req: IncomingMessage, schema: T, maxBytes = 32 * 1024 * 1024): Promise<z.infer<T>> {
  const raw = await readBody(req, maxBytes);
  let value: unknown = {};
  if (raw.length) {
    try {
      value = JSON.parse(raw.toString('utf8'));
    } catch {
      throw new WarrenError('invalid_argument', 'body is not valid JSON');
    }
  }
  const r = schema.safeParse(value);
  if (!r.success) throw invalid(r.error, 'body');
  return r.data;
}

/** The keys of an object schema whose values are arrays (optional or defaulted ones too): repeatable in a query. */
export function arrayKeys(schema: z.ZodType): string[] {
  const shape = (schema as { shape?: Record<string, z.ZodType> }).shape ?? {};
  return Object.entries(shape)
    .filter(([, v]) => {
      let s = v as { def?: { type?: string; innerType?: unknown } };
      while (s.def && (s.def.type === 'optional' || s.def.type === 'default' || s.def.type === 'nullable')) s = s.def.innerType as typeof s;
      return s.def?.type === 'array';
    })
    .map(([k]) => k);
}

/** Validates the query string; repeated keys named in `arrays` become arrays. */
export function query<T extends z.ZodType>(url: URL, schema: T, arrays: string[] = arrayKeys(schema)): z.infer<T> {
  const obj: Record<string, unknown> = {};
  for (const key of new Set(url.searchParams.keys())) {
    const all = url.searchParams.getAll(key);
    obj[key] = arrays.includes(key) ? all : all[all.length - 1];
  }
  const r = schema.safeParse(obj);
  if (!r.success) throw invalid(r.error, 'query');
  return r.data;
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export function sendEmpty(res: ServerResponse, status = 204): void {
  res.writeHead(status);
  res.end();
}

export function sendError(res: ServerResponse, err: unknown): void {
  const { status, body } = serializeError(err);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // A body not read to its end (too large, or refused before it was read) is not read at all:
  // the connection closes after the answer.
  if (!res.req.complete) res.setHeader('connection', 'close');
  sendJson(res, status, body);
}
