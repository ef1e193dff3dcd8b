import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebhookBody, type WebhookEvent } from '@warren/api';

/** One POST a test's receiver took, and how it answered. */
export interface WebhookDelivery {
  /** What it answered (0: nothing, it held the request until the sender gave up). */
  status: number;
  body: string;
  events: WebhookEvent[];
  headers: IncomingMessage['headers'];
  /** When it came (ms, this process's clock). */
  at: number;
}

/** A webhook receiver for tests: a real HTTP server on 127.0.0.1. */
export interface WebhookReceiver {
  url: string;
  /** Every POST, in the order they came. */
  deliveries: WebhookDelivery[];
  /** The events of the deliveries answered 2xx, in the order they came. */
  accepted(): WebhookEvent[];
  /** Waits until `pred` holds (checked at each delivery), failing after `ms`. */
  until(pred: () => boolean, ms?: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * Starts a receiver that answers its `n`th POST (from 0) with `answer(n)`: a status, or `hang`
 * (no answer, until the sender gives up).
 */
export async function startWebhookReceiver(answer: (n: number) => number | 'hang' = () => 200): Promise<WebhookReceiver> {
  const deliveries: WebhookDelivery[] = [];
  const waiters = new Set<() => void>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      const a = answer(deliveries.length);
      deliveries.push({ status: a === 'hang' ? 0 : a, body, events: WebhookBody.parse(JSON.parse(body)).events, headers: req.headers, at: Date.now() });
      for (const w of waiters) w();
      if (a !== 'hang') res.writeHead(a).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    deliveries,
    accepted: () => deliveries.filter((d) => d.status >= 200 && d.status < 300).flatMap((d) => d.events),
    until: (pred, ms = 10_000) =>
      new Promise<void>((resolve, reject) => {
        if (pred()) return resolve();
        const check = (): void => {
          if (!pred()) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`not so after ${ms} ms (${deliveries.length} deliveries)`));
        }, ms);
        waiters.add(check);
      }),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
