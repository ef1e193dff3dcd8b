import { ROUTES } from '@warren/api';
import type { On, RouteDeps } from './route-types.js';

/** Leases: sandboxes that live only while their lease is renewed. */
export function leaseRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.createLease, async (c) => {
    c.reply(await d.leases.create(c.caller, await c.body()));
  });
  on(ROUTES.listLeases, async (c) => {
    c.reply({ leases: await d.leases.list(c.caller, c.query().state) });
  });
  on(ROUTES.getLease, async (c) => {
    c.reply(await d.leases.get(c.caller, c.params.id));
  });
  on(ROUTES.renewLease, async (c) => {
    const body = await c.body();
    c.reply(await d.leases.renew(c.caller, c.params.id, body.ttlSeconds));
  });
  on(ROUTES.deleteLease, async (c) => {
    await d.leases.delete(c.caller, c.params.id);
    c.reply();
  });
}
