import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { ROUTES } from '@warren/api';
import type { On, RouteDeps } from './route-types.js';

/** A full VM's display: its screen as a PNG, and keys and pointer events to it. */
export function displayRoutes(on: On, d: RouteDeps): void {
  on(ROUTES.screen, async (c) => {
    const png = await d.sandboxes.on(c.caller, c.params.id, (sid, edge) => edge.screen(sid));
    c.res.writeHead(200, { 'content-type': 'image/png', 'cache-control': 'no-store' });
    await pipeline(Readable.from(png), c.res).catch(() => c.res.destroy());
  });
  on(ROUTES.input, async (c) => {
    const body = await c.body();
    await d.sandboxes.on(c.caller, c.params.id, (sid, edge) => edge.input(sid, body.events));
    c.reply();
  });
}
