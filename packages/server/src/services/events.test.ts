import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventLog } from './events.js';
import type { EventRecord } from '../store/events.js';

/** A store of events the test commits by hand, in any order (as two replicas' may be). */
function eventStore() {
  const rows: EventRecord[] = [];
  return {
    rows,
    commit: (seq: number, tenant = 't') => rows.push({ seq, tenant, at: Date.now(), type: 'created', data: { sandbox: `sb_${seq}`, labels: {}, lease: null } }),
    store: {
      events: {
        after: async (tenant: string, seq: number, limit: number) =>
          rows
            .filter((r) => r.tenant === tenant && r.seq > seq)
            .sort((a, b) => a.seq - b.seq)
            .slice(0, limit),
        last: async () => Math.max(0, ...rows.map((r) => r.seq)),
        append: async () => undefined,
        prune: async () => 0,
      },
    },
  };
}

test('a stream yields each event once, in order of commit; one another replica numbered earlier but committed later still comes; another tenant’s never', async () => {
  const s = eventStore();
  s.commit(1);
  const log = new EventLog(s.store as never, { warn: () => undefined });
  const stop = new AbortController();
  // The stream's polls do not hold the process open (a server's sockets do): this does, meanwhile.
  const hold = setInterval(() => undefined, 1000);
  const it = log.stream('t', 0, stop.signal);
  const seen: number[] = [];
  const next = async (): Promise<void> => {
    const r = await it.next();
    if (!r.done) seen.push(r.value.seq);
  };
  await next();
  // 3 commits before 2 (another replica's), and another tenant's 4 between.
  s.commit(3);
  s.commit(4, 'other');
  await next();
  s.commit(2);
  await next();
  s.commit(5);
  await next();
  assert.deepEqual(seen, [1, 3, 2, 5]);
  stop.abort();
  await it.return(undefined);
  clearInterval(hold);
});
