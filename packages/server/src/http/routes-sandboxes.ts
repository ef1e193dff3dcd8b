import { ROUTES, WarrenError } from '@warren/api';
import type { On, RouteDeps } from './route-types.js';
import { decodeFiles } from '../services/sandboxes.js';

/** Create, read, list, delete, timeout, pause/resume and batch routes. */
export function sandboxRoutes(on: On, d: RouteDeps): void {
  const svc = d.sandboxes;
  on(ROUTES.createSandbox, async (c) => {
    const body = await c.body();
    const sb = await svc.create(c.caller, body);
    c.audit.sandbox = sb.id;
    c.reply(sb);
  });
  on(ROUTES.batchCreate, async (c) => {
    const body = await c.body();
    // One decoded copy of the files for every create of the batch, not one each.
    const files = decodeFiles(body.template);
    const template = { ...body.template, files: undefined, requestId: undefined };
    const r = await svc.createMany(c.caller, template, body.count, files);
    c.reply({ sandboxes: r.sandboxes, errors: r.errors.map((e) => ({ code: e.code, message: e.message })) });
  });
  on(ROUTES.forkSandbox, async (c) => {
    const body = await c.body();
    c.audit.sandbox = c.params.id;
    c.reply(await d.forks.fork(c.caller, c.params.id, body));
  });
  on(ROUTES.createSnapshot, async (c) => {
    const body = await c.body();
    c.audit.sandbox = c.params.id;
    c.reply(await d.snapshots.create(c.caller, c.params.id, body));
  });
  on(ROUTES.listSnapshots, async (c) => c.reply({ snapshots: await d.snapshots.list(c.caller, c.query()) }));
  on(ROUTES.deleteSnapshot, async (c) => {
    await d.snapshots.delete(c.caller, c.params.name, { force: c.query().force ?? false });
    c.reply();
  });
  on(ROUTES.listSandboxes, async (c) => {
    c.reply(await svc.list(c.caller, c.query()));
  });
  on(ROUTES.getSandbox, async (c) => c.reply(await svc.toApi(await svc.record(c.caller, c.params.id))));
  on(ROUTES.deleteSandbox, async (c) => {
    await svc.delete(c.caller, c.params.id);
    c.reply();
  });
  on(ROUTES.setTimeout, async (c) => {
    const body = await c.body();
    c.reply(await svc.toApi(await svc.setTimeout(c.caller, c.params.id, body.ttlSeconds)));
  });
  on(ROUTES.createPool, async (c) => {
    const body = await c.body();
    c.reply(await d.pools.create(c.caller, body));
  });
  on(ROUTES.listPools, async (c) => c.reply({ pools: await d.pools.list(c.caller) }));
  on(ROUTES.deletePool, async (c) => {
    await d.pools.delete(c.caller, c.params.id);
    c.reply();
  });
  on(ROUTES.setNetwork, async (c) => {
    const body = await c.body();
    c.reply(await svc.toApi(await svc.setNetwork(c.caller, c.params.id, body)));
  });
  on(ROUTES.pause, async (c) => {
    await svc.pause(c.caller, c.params.id);
    c.reply({ state: 'paused' });
  });
  on(ROUTES.resume, async (c) => {
    await svc.resume(c.caller, c.params.id);
    c.reply({ state: 'running' });
  });
  for (const op of ['pause', 'resume', 'delete'] as const) {
    const spec = op === 'pause' ? ROUTES.batchPause : op === 'resume' ? ROUTES.batchResume : ROUTES.batchDelete;
    on(spec, async (c) => {
      const body = await c.body();
      if (!Object.keys(body.labels).length) throw new WarrenError('invalid_argument', 'name at least one label');
      c.reply({ count: await svc.batch(c.caller, op, body.labels) });
    });
  }
}
