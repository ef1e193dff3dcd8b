import { WarrenError } from './errors.js';

/** The names of a path template's `{name}` segments, as a union (`never` when it has none). */
export type PathParamNames<P extends string> = P extends `${string}{${infer N}}${infer Rest}` ? N | PathParamNames<Rest> : never;

/**
 * A route's path parameters, read from its template: `/v1/sandboxes/{id}` takes `{ id: string }`,
 * a path with none takes `{}`. The SDK fills a path with them and the server's router hands them
 * to the handler, so both sides name the same parameters. A path known only as `string` takes any.
 */
export type PathParams<P extends string> = string extends P ? Record<string, string> : { [K in PathParamNames<P>]: string };

/**
 * A route's path with its `{name}` segments filled in from `params`, each percent-encoded (so a
 * `/` in a value stays inside its segment). A parameter that is missing (a caller the compiler did
 * not check) or empty (a path no route matches) is invalid_argument.
 * @example routePath(ROUTES.getSandbox, { id: 'sb_1' }) // '/v1/sandboxes/sb_1'
 */
export function routePath<P extends string>(spec: { path: P }, params: PathParams<P>): string {
  const values: Partial<Record<string, string>> = params;
  return spec.path.replace(/\{(\w+)\}/g, (_m, name: string) => {
    const v = values[name];
    if (v === undefined || v === '') throw new WarrenError('invalid_argument', `${spec.path} needs ${name}`);
    return encodeURIComponent(v);
  });
}
