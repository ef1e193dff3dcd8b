import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Where `npm run build -w @warren/dashboard` writes the dashboard (packages/dashboard/dist). */
export const DASHBOARD_DIR = fileURLToPath(new URL('../../../dashboard/dist/', import.meta.url));

/** The most the dashboard's files may hold together (they are kept in memory). */
const MAX_DASHBOARD_BYTES = 32 * 1024 * 1024;

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.json': 'application/json',
};

/**
 * What the page may do: its own scripts only (no inline script, no eval), styles of its own and
 * inline (the terminal sets element styles), images of its own or made in the page (a VM's
 * screen), calls to this origin only; no framing (clickjacking), no base or form elsewhere.
 */
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; " +
  "font-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

interface StaticFile {
  body: Buffer;
  headers: Record<string, string>;
}

/**
 * The dashboard's files, read once at start: `/` is its page, `/assets/NAME` its scripts and
 * styles (names with the build's content hash: cached for good). Its calls are the public API,
 * with the key the person logs in with; it holds no secret and sees nothing the key does not.
 */
export class Dashboard {
  private constructor(private readonly files: Map<string, StaticFile>) {}

  /** The build in `dir`, or null when there is none (the page then says how to build it). */
  static load(dir: string = DASHBOARD_DIR): Dashboard | null {
    if (!existsSync(join(dir, 'index.html'))) return null;
    const files = new Map<string, StaticFile>();
    let total = 0;
    const add = (path: string, file: string, immutable: boolean): void => {
      const body = readFileSync(file);
      total += body.length;
      if (total > MAX_DASHBOARD_BYTES) throw new Error(`the dashboard's files pass ${MAX_DASHBOARD_BYTES} bytes`);
      const headers: Record<string, string> = {
        'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
        'cache-control': immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      };
      if (path === '/') headers['content-security-policy'] = CSP;
      files.set(path, { body, headers });
    };
    add('/', join(dir, 'index.html'), false);
    const assets = join(dir, 'assets');
    if (existsSync(assets)) for (const name of readdirSync(assets)) if (statSync(join(assets, name)).isFile()) add(`/assets/${name}`, join(assets, name), true);
    return new Dashboard(files);
  }

  /** Serves a GET or HEAD of one of its paths; false for any other request (the API's). */
  serve(req: IncomingMessage, res: ServerResponse, pathname: string): boolean {
    if (req.method !== 'GET' && req.method !== 'HEAD') return false;
    const f = this.files.get(pathname);
    if (!f) return false;
    res.writeHead(200, { ...f.headers, 'content-length': String(f.body.length) });
    res.end(req.method === 'HEAD' ? undefined : f.body);
    return true;
  }
}
