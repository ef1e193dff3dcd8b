/**
 * `fn` over `items` with at most `limit` calls in flight; the results in the items' order.
 * A rejection rejects the whole (after the calls in flight settle).
 * @example await mapLimit(ids, 32, (id) => readStats(id))
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return out;
}
