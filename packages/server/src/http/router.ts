import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, type PathParams, type RouteSpec } from '@warren/api';

/** A matched request: its path parameters typed by the route's template when the route is known. */
export interface RouteContext<Params = Record<string, string>> {
  req: IncomingMessage;
  res: ServerResponse;
  params: Params;
  url: URL;
}

/** What the router calls for a matched request. */
export type Handler<Params = Record<string, string>> = (ctx: RouteContext<Params>) => Promise<void>;

interface Compiled {
  method: string;
  re: RegExp;
  names: string[];
  handler: Handler;
}

/**
 * Matches a method and path to a handler; `{name}` segments become params. A `{name}` matches one
 * whole non-empty segment (`[^/]+`), so a matched route's params hold every name of its template,
 * each non-empty after decoding: what `PathParams` of the template promises its handler.
 */
export class Router {
  private readonly routes: Compiled[] = [];

  add<P extends string>(spec: { method: RouteSpec['method']; path: P }, handler: Handler<PathParams<P>>): void {
    const names: string[] = [];
    const re = new RegExp(
      '^' +
        spec.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{(\w+)\\?\}/g, (_m, n: string) => {
          names.push(n);
          return '([^/]+)';
        }) +
        '$',
    );
    // The one place the template's names meet the values matched for them (see the class comment).
    this.routes.push({ method: spec.method, re, names, handler: handler as Handler });
  }

  /** The handler for a request, or 'method' when only the method is wrong, or null. */
  match(method: string, path: string): { handler: Handler; params: Record<string, string> } | 'method' | null {
    let pathMatched = false;
    for (const r of this.routes) {
      const m = r.re.exec(path);
      if (!m) continue;
      pathMatched = true;
      // HEAD is a GET whose body Node's server leaves out.
      if (r.method !== method && !(method === 'HEAD' && r.method === 'GET')) continue;
      const params: Record<string, string> = {};
      r.names.forEach((n, i) => {
        try {
          params[n] = decodeURIComponent(m[i + 1] ?? '');
        } catch {
          throw new WarrenError('invalid_argument', `the ${n} in the path is not valid percent-encoding`);
        }
      });
      return { handler: r.handler, params };
    }
    return pathMatched ? 'method' : null;
  }
}
