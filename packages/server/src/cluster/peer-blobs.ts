import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream } from 'node:stream/web';
import type { Store } from '../store/store.js';

/** Set on a replica's read from a peer: the peer answers from its own blobs only (no loops). */
export const PEER_HEADER = 'x-warren-peer';

/** Headers of a blob's answer passed on as the peer sent them. */
const PASSED = ['content-type', 'content-length', 'accept-ranges', 'last-modified', 'content-range'];

/** Replicas seen within this are asked (they say they are alive every few seconds). */
const LIVE_MS = 30_000;

/**
 * Serves a blob this replica lacks from the replica that has it: each replica keeps the layers
 * imported, pulled or uploaded through it, and an edge reads blobs from the replica it joined,
 * so a layer made through another replica is read from there, byte ranges and all. The other
 * replicas are found in the store (each says it is alive there, `seeReplica`), asked in turn
 * with the join token; answers whether one had it (the answer is then sent).
 */
export function peerBlobs(o: {
  store: Store;
  /** This replica's id in the store (it does not ask itself). */
  self: string;
  joinToken: string;
  /** How long a peer may take to start its answer (ms; default 10,000). */
  answerMs?: number;
}): (name: string, req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  return async (name, req, res) => {
    if (req.headers[PEER_HEADER]) return false;
    for (const peer of await o.store.liveReplicas(LIVE_MS, o.self)) {
      const ac = new AbortController();
      const timer = setTimeout(() => ac.abort(), o.answerMs ?? 10_000);
      let r: Response;
      try {
        r = await fetch(`${peer.url}/v1/blobs/${encodeURIComponent(name)}`, {
          method: req.method === 'HEAD' ? 'HEAD' : 'GET',
          headers: { authorization: `Bearer ${o.joinToken}`, [PEER_HEADER]: '1', ...(req.headers.range ? { range: req.headers.range } : {}) },
          signal: ac.signal,
        });
      } catch {
        continue; // gone, or too slow: the next one
      } finally {
        clearTimeout(timer);
      }
      if (r.status !== 200 && r.status !== 206 && r.status !== 416) {
        await r.body?.cancel().catch(() => undefined);
        continue;
      }
      const headers: Record<string, string> = {};
      for (const h of PASSED) {
        const v = r.headers.get(h);
        if (v !== null) headers[h] = v;
      }
      res.writeHead(r.status, headers);
      if (!r.body) res.end();
      else await pipeline(Readable.fromWeb(r.body as ReadableStream<Uint8Array>), res).catch(() => res.destroy());
      return true;
    }
    return false;
  };
}
