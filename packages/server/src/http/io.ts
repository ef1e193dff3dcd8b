import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, serializeError, type z } from '@warren/api';

/** Reads a request body up to `maxBytes`; payload_too_large past it. */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? -1);
  if (declared > maxBytes) throw new WarrenError('payload_too_large', `body is larger than ${maxBytes} bytes`, { maxBytes });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    const b = c as Buffer;
    size += b.length;
    if (size > maxBytes) throw new WarrenError('payload_too_large', `body is larger than ${maxBytes} bytes`, { maxBytes });
    chunks.push(b);
  }
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
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
  sendJson(res, status, body);
}
