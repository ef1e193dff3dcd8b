import { WarrenError } from '@warren/api';
import type { SandboxRecord, Store } from '../store/store.js';
import { GroupWrite } from './group-write.js';

/** How creates without a quota to count reach the store: in group writes (see GroupWrite). */
export interface CreateWrites {
  /** Records a create's sandbox, `creating`, with the others asked for while a write is in flight. */
  insert(rec: SandboxRecord): Promise<void>;
  /** Marks it running, only if it is still `creating` (a delete meanwhile wins): whether it did. */
  start(id: string): Promise<boolean>;
}

/**
 * With a store whose writes are done inline (SQLite's), the first write of a group waits for the
 * rest of this turn of the event loop, and the creates whose requests were read in it go
 * together: without the wait every write of a burst went alone (a commit of ~0.1 ms each here).
 * A store's write that is in flight (PostgreSQL's round trip) gathers the next group by itself.
 */
const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

export function createWrites(store: Store): CreateWrites {
  const linger = store.writesInline ? turn : undefined;
  const inserts = new GroupWrite<SandboxRecord, void>(
    async (recs) => {
      try {
        await store.insertSandboxes(recs);
        return recs.map(() => ({ status: 'fulfilled', value: undefined }));
      } catch (e) {
        if (recs.length === 1 || (e instanceof WarrenError && e.code === 'unavailable')) throw e;
        // One record that cannot go in (its requestId taken meanwhile) fails its own create only.
        return Promise.allSettled(recs.map((r) => store.insertSandbox(r)));
      }
    },
    { linger },
  );
  const starts = new GroupWrite<string, boolean>(
    async (ids) => {
      const started = new Set(await store.markStarted(ids));
      return ids.map((id) => ({ status: 'fulfilled', value: started.has(id) }));
    },
    { linger },
  );
  return { insert: (rec) => inserts.add(rec), start: (id) => starts.add(id) };
}
