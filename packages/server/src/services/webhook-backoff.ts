/** How a webhook's failed deliveries are retried: the first wait, and the most it grows to (ms). */
export interface WebhookBackoff {
  firstMs: number;
  maxMs: number;
}

/** 0.5 s, doubling to a minute. */
export const WEBHOOK_BACKOFF: WebhookBackoff = { firstMs: 500, maxMs: 60_000 };

/**
 * The wait before retry `attempt` (1: after the first failure): `firstMs` doubling per attempt up
 * to `maxMs`, of which a random half is taken off (`random()` in [0, 1)), so replicas' and
 * hooks' retries after a receiver's outage do not come back all at once, and no wait is shorter
 * than half its step.
 */
export function webhookBackoffMs(attempt: number, random: () => number, b: WebhookBackoff = WEBHOOK_BACKOFF): number {
  const step = Math.min(b.maxMs, b.firstMs * 2 ** Math.min(Math.max(0, attempt - 1), 30));
  return Math.round(step / 2 + (step / 2) * random());
}
