import type { IncomingMessage, ServerResponse } from 'node:http';
import { WarrenError, type RouteSpec } from '@warren/api';

export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  params: Record<string, string>;
  url: URL;
}

export type Handler = (ctx: RouteContext) => Promise<void>;

interface Compiled {
  method: string;
  re: RegExp;
  names: string[];
  handler: Handler;
}

/** Matches a method and path to a handler; `{name}` segments become params. */
export class Router {
  private readonly routes: Compiled[] = [];

  add(spec: Pick<RouteSpec, 'method' | 'path'>, handler: Handler): void {
    const names: string[] = [];
    const re = new RegExp(
      '^' +
        spec.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{(\w+)\\?\}/g, (_m, n: string) => {
          names.push(n);
          return '([^/]+)';
        }) +
        '$',
    );
    this.routes.push({ method: spec.method, re, names, handler });
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
