import { e2bUrls } from '../compat/e2b/index.js';
import { ROUTES, WarrenError } from '@warren/api';
import type { On, RouteDeps } from './route-types.js';

/** Images, nodes, keys and server info. */
export function opsRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.listImages, async (c) => {
    const images = (await d.catalogue.listImages()).filter((i) => i.tenant === null || i.tenant === c.caller.tenant || c.caller.role === 'admin');
    c.reply({ images: await d.imageUse.listed(c.caller, images) });
  });
  on(ROUTES.listNodes, async (c) => {
    // Node addresses, capacity and every tenant's load are the operator's to see.
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can list the nodes');
    c.reply(await d.nodes.list());
  });
  on(ROUTES.metricsHistory, async (c) => {
    // Every tenant's activity together: the operator's to see, as the nodes are.
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can read the metrics history');
    c.reply({ intervalSeconds: (d.history?.intervalMs ?? 0) / 1000, points: d.history?.list() ?? [] });
  });
  on(ROUTES.joinNode, async (c) => {
    if (!c.caller.node) throw new WarrenError('permission_denied', 'edges join with the join token, not an API key');
    c.reply(await d.nodes.join(await c.body()));
  });
  on(ROUTES.heartbeat, async (c) => {
    if (!c.caller.node) throw new WarrenError('permission_denied', 'edges send heartbeats with the join token, not an API key');
    const body = await c.body();
    await d.nodes.heartbeat(c.params.id, body.boot, body.load);
    c.reply();
  });
  on(ROUTES.drainNode, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can drain a node');
    await d.nodes.setDraining(c.params.id, true);
    c.reply();
  });
  on(ROUTES.undrainNode, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can put a node back in service');
    await d.nodes.setDraining(c.params.id, false);
    c.reply();
  });
  on(ROUTES.createKey, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can create keys');
    const body = await c.body();
    const role = body.role ?? 'user';
    c.reply({ ...(await d.auth.createKey(body.tenant, role, body.quota ?? {})), tenant: body.tenant, role });
  });
  on(ROUTES.deleteKey, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can revoke keys');
    await d.auth.revoke(c.params.keyId);
    c.reply();
  });
  on(ROUTES.audit, async (c) => {
    if (c.caller.role !== 'admin') throw new WarrenError('permission_denied', 'only an admin key can read the audit log');
    c.reply({ entries: await d.audit.list(c.query()) });
  });
  on(ROUTES.info, async (c) =>
    c.reply({
      version: d.version,
      backends: d.nodes.backends(),
      // Where E2B's SDKs reach this server (E2B_API_URL, E2B_SANDBOX_URL), by the host the caller used.
      e2b: e2bUrls(`http://${c.req.headers.host ?? 'localhost'}`),
      endpoints: d.nodes.endpoints(),
    }),
  );
}
