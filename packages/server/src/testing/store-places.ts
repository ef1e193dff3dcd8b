import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PgStore } from '../store/pg-store.js';
import { SqliteStore } from '../store/sqlite-store.js';
import type { Store } from '../store/store.js';
import type { TestPostgres } from './postgres.js';

/** Where a test's state lives (a SQLite file, a PostgreSQL database): stores opened on it share it. */
export interface StorePlace {
  /** A new store on this place (a second one is another connection, as a restart or a replica). */
  open(): Promise<Store>;
  /** Closes the stores opened and removes the place. */
  remove(): Promise<void>;
}

/** A kind of store the same tests run on. */
export interface StoreKind {
  name: string;
  place(): Promise<StorePlace>;
}

function tracked(open: () => Promise<Store>, gone: () => Promise<void>): StorePlace {
  const opened: Store[] = [];
  return {
    open: async () => {
      const s = await open();
      opened.push(s);
      return s;
    },
    remove: async () => {
      for (const s of opened.splice(0)) await s.close().catch(() => undefined);
      await gone();
    },
  };
}

/** A SQLite file in a temporary dir. */
export const sqliteStores: StoreKind = {
  name: 'sqlite',
  place: async () => {
    const dir = await mkdtemp(join(tmpdir(), 'warren-store-'));
    return tracked(
      async () => new SqliteStore(join(dir, 'warren.db')),
      () => rm(dir, { recursive: true, force: true }),
    );
  },
};

let databases = 0;

/** A new database on a test's PostgreSQL server (startTestPostgres). */
export function postgresStores(server: () => Promise<TestPostgres>): StoreKind {
  return {
    name: 'postgres',
    place: async () => {
      const url = await (await server()).createDatabase(`t${process.pid}_${++databases}`);
      return tracked(
        () => PgStore.open(url, { max: 8 }),
        async () => undefined,
      );
    },
  };
}
