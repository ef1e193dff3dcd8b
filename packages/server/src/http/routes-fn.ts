import { ROUTES } from '@warren/api';
import { sendJson } from './io.js';
import type { On, RouteDeps } from './route-types.js';

/** FnCall: stateless calls in warm workers. */
export function fnRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.fnRun, async (c) => {
    const body = await c.body();
    sendJson(c.res, 200, await d.fn.run(c.caller, body));
  });
  on(ROUTES.fnBatch, async (c) => {
    const body = await c.body();
    sendJson(c.res, 200, { results: await d.fn.batch(c.caller, body.calls) });
  });
}
