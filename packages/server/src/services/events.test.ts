import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventLog } from './events.js';
import type { EventRecord } from '../store/events.js';

/** A store of events on the test's clock, committed by hand in any order (as two replicas' may be). */
function eventStore() {
  let now = 1000;
  const rows: EventRecord[] = [];
  return {
    advance: (ms: number) => (now += ms),
    commit: (seq: number, o: { tenant?: string; at?: number } = {}) =>
      rows.push({ seq, tenant: o.tenant ?? 't', at: o.at ?? now, type: 'created', data: { sandbox: `sb_${seq}`, labels: {}, lease: null } }),
    store: {
      events: {
        after: async (tenant: string, seq: number, limit: number, settledMs = 0) =>
          rows
            .filter((r) => r.tenant === tenant && r.seq > seq && r.at <= now - settledMs)
            .sort((a, b) => a.seq - b.seq)
            .slice(0, limit),
        last: async () => Math.max(0, ...rows.map((r) => r.seq)),
        append: async () => undefined,
        prune: async () => 0,
      },
    },
  };
}

test('a stream yields events in seq order, each once, only once settled: one another replica numbered earlier but committed later comes before the later one; read again from an id, nothing is missed', async () => {
  const s = eventStore();
  const log = new EventLog(s.store as never, { warn: () => undefined }, { settleMs: 500, pollMs: 2 });
  const stop = new AbortController();
  // The stream's polls do not hold the process open (a server's sockets do): this does, meanwhile.
  const hold = setInterval(() => undefined, 1000);
  const it = log.stream('t', 0, stop.signal);
  const seqOf = async (p: Promise<IteratorResult<EventRecord>>): Promise<number> => {
    const r = await p;
    return r.done ? -1 : r.value.seq;
  };
  s.commit(1);
  s.advance(600);
  assert.equal(await seqOf(it.next()), 1);
  // 3 is committed (and another tenant's 4); 2, numbered before it, not yet: the stream waits.
  s.commit(3);
  s.commit(4, { tenant: 'other' });
  const waiting = seqOf(it.next());
  // A few polls while 3 is there and 2 is not (what it must not take for the end of the line).
  await new Promise((r) => setTimeout(r, 20));
  s.commit(2, { at: 950 });
  s.advance(600);
  assert.equal(await waiting, 2);
  assert.equal(await seqOf(it.next()), 3);
  stop.abort();
  await it.return(undefined);
  // From the id of 2: 3, and nothing before it.
  const again = log.stream('t', 2, new AbortController().signal);
  assert.equal(await seqOf(again.next()), 3);
  await again.return(undefined);
  clearInterval(hold);
});
