import { WarrenError, type Sandbox } from '@warren/api';
import type { RouteDeps } from '../../http/route-types.js';
import type { Caller } from '../../services/sandboxes.js';

/** E2B's list (GET /v2/sandboxes): what it asks for, checked. */
export interface ListQuery {
  labels: Array<[string, string]>;
  states: Array<'running' | 'paused'>;
  template?: string;
  /** Only sandboxes started after this (ms). */
  startedAfter?: number;
  order: 'asc' | 'desc';
  limit: number;
  /** The last sandbox of the page before (its nextToken). */
  from?: string;
}

/** The page size when E2B's SDK names none, and the most it may ask for. */
const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1000;

/** A sandbox's next token: its id, which pages continue from. */
export const nextToken = (id: string): string => Buffer.from(id).toString('base64url');

/** E2B's list query as it sends it (pure): metadata one value of k=v pairs, state repeated or comma-joined. */
export function listQuery(q: URLSearchParams): ListQuery {
  const labels: Array<[string, string]> = [];
  // The metadata filter is one query value: k=v pairs joined by &, each part encoded again.
  for (const [k, v] of new URLSearchParams(q.get('metadata') ?? '')) labels.push([decodeURIComponent(k), decodeURIComponent(v)]);
  const states = q.getAll('state').flatMap((s) => s.split(',').filter(Boolean));
  for (const s of states) if (s !== 'running' && s !== 'paused') throw new WarrenError('invalid_argument', `state ${s}: running or paused`);
  const order = q.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw new WarrenError('invalid_argument', `order ${order}: asc or desc`);
  const limit = q.has('limit') ? Number(q.get('limit')) : DEFAULT_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) throw new WarrenError('invalid_argument', `limit: 1 to ${MAX_LIMIT}`);
  const after = q.get('startedAfter');
  const startedAfter = after ? Date.parse(after) : undefined;
  if (Number.isNaN(startedAfter)) throw new WarrenError('invalid_argument', 'startedAfter: a date and time (RFC 3339)');
  const token = q.get('nextToken');
  const from = token ? Buffer.from(token, 'base64url').toString() : undefined;
  if (from !== undefined && !/^sb_[0-9a-z]+$/.test(from)) throw new WarrenError('invalid_argument', 'a nextToken this server did not give');
  return { labels, states: [...new Set(states)] as ListQuery['states'], template: q.get('template') || undefined, startedAfter, order, limit, from };
}

/** The E2B template a sandbox was made from (the label its create kept it in, else its image). */
export const templateOf = (s: Sandbox, label: string): string => s.labels[label] ?? s.image;

/**
 * A page of the caller's live sandboxes as E2B lists them: newest first (or oldest), in the
 * states asked for (both when none), of a template, started after a time; and whether more
 * follow (one past the page is looked for). Read in batches from the store's live records.
 */
export async function listPage(d: RouteDeps, c: Caller, q: ListQuery, templateLabel: string): Promise<{ page: Sandbox[]; next: string | null }> {
  const out: Sandbox[] = [];
  let from = q.from;
  const batch = Math.min(Math.max(q.limit + 1, 50), MAX_LIMIT + 1);
  for (;;) {
    const rows = await d.sandboxes.listLive(c, { labels: q.labels, order: q.order, from, limit: batch });
    for (const s of rows) {
      from = s.id;
      const started = Date.parse(s.createdAt);
      // Newest first: the rest are older still.
      if (q.order === 'desc' && q.startedAfter !== undefined && started < q.startedAfter) return done(out, q.limit);
      if (s.state !== 'running' && s.state !== 'paused') continue;
      if (q.states.length && !q.states.includes(s.state)) continue;
      if (q.template !== undefined && templateOf(s, templateLabel) !== q.template) continue;
      if (q.startedAfter !== undefined && started < q.startedAfter) continue;
      out.push(s);
      if (out.length > q.limit) return done(out, q.limit);
    }
    if (rows.length < batch) return done(out, q.limit);
  }
}

function done(out: Sandbox[], limit: number): { page: Sandbox[]; next: string | null } {
  const page = out.slice(0, limit);
  return { page, next: out.length > limit ? nextToken(page[page.length - 1]!.id) : null };
}
