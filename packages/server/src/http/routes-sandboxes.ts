import { ROUTES, WarrenError } from '@warren/api';
import { sendEmpty, sendJson } from './io.js';
import { sandboxId, type On, type RouteDeps } from './route-types.js';
import { decodeFiles } from '../services/sandboxes.js';

/** Create, read, list, delete, timeout, pause/resume and batch routes. */
export function sandboxRoutes(on: On, d: RouteDeps): void {
  const svc = d.sandboxes;
  on(ROUTES.createSandbox, async (c) => {
    const body = await c.body();
    const sb = await svc.create(c.caller, body);
    c.audit.sandbox = sb.id;
    sendJson(c.res, 201, sb);
  });
  on(ROUTES.batchCreate, async (c) => {
    const body = await c.body();
    // One decoded copy of the files for every create of the batch, not one each.
    const files = decodeFiles(body.template);
    const template = { ...body.template, files: undefined, requestId: undefined };
    const r = await svc.createMany(c.caller, template, body.count, files);
    sendJson(c.res, 201, { sandboxes: r.sandboxes, errors: r.errors.map((e) => ({ code: e.code, message: e.message })) });
  });
  on(ROUTES.listSandboxes, async (c) => {
    sendJson(c.res, 200, await svc.list(c.caller, c.query()));
  });
  on(ROUTES.getSandbox, async (c) => sendJson(c.res, 200, await svc.toApi(await svc.record(c.caller, sandboxId(c)))));
  on(ROUTES.deleteSandbox, async (c) => {
    await svc.delete(c.caller, sandboxId(c));
    sendEmpty(c.res);
  });
  on(ROUTES.setTimeout, async (c) => {
    const body = await c.body();
    sendJson(c.res, 200, await svc.toApi(await svc.setTimeout(c.caller, sandboxId(c), body.ttlSeconds)));
  });
  on(ROUTES.createPool, async (c) => {
    const body = await c.body();
    sendJson(c.res, 201, await d.pools.create(c.caller, body));
  });
  on(ROUTES.listPools, async (c) => sendJson(c.res, 200, { pools: await d.pools.list(c.caller) }));
  on(ROUTES.deletePool, async (c) => {
    await d.pools.delete(c.caller, c.params.id ?? '');
    sendEmpty(c.res);
  });
  on(ROUTES.setNetwork, async (c) => {
    const body = await c.body();
    sendJson(c.res, 200, await svc.toApi(await svc.setNetwork(c.caller, sandboxId(c), body)));
  });
  on(ROUTES.pause, async (c) => {
    await svc.pause(c.caller, sandboxId(c));
    sendJson(c.res, 200, { state: 'paused' });
  });
  on(ROUTES.resume, async (c) => {
    await svc.resume(c.caller, sandboxId(c));
    sendJson(c.res, 200, { state: 'running' });
  });
  for (const op of ['pause', 'resume', 'delete'] as const) {
    const spec = op === 'pause' ? ROUTES.batchPause : op === 'resume' ? ROUTES.batchResume : ROUTES.batchDelete;
    on(spec, async (c) => {
      const body = await c.body();
      if (!Object.keys(body.labels).length) throw new WarrenError('invalid_argument', 'name at least one label');
      sendJson(c.res, 200, { count: await svc.batch(c.caller, op, body.labels) });
    });
  }
}
