import { ROUTES } from '@warren/api';
import type { On, RouteDeps } from './route-types.js';

/** FnCall: stateless calls in warm workers. */
export function fnRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.fnRun, async (c) => {
    const body = await c.body();
    c.reply(await d.fn.run(c.caller, body));
  });
  on(ROUTES.fnBatch, async (c) => {
    const body = await c.body();
    c.reply({ results: await d.fn.batch(c.caller, body.calls) });
  });
}
