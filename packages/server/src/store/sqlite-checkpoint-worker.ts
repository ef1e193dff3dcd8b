// The SQLite store's WAL checkpoints on a thread of their own (SqliteStore starts it): a
// checkpoint copies the log into the database file and waits for two fsyncs, which on the event
// loop's thread held every request behind it (a burst of creates: ~0.2 ms of each create's and
// delete's wall time, in stalls of several milliseconds every thousand pages). PASSIVE: it never
// waits for the writer or a reader; what it cannot copy now it copies at the next tick.
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';

const { file, everyMs } = workerData as { file: string; everyMs: number };
const db = new Database(file);
const timer = setInterval(() => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch {
    // Busy, or the disk full: the next tick tries again, and the writer's own threshold bounds the log.
  }
}, everyMs);
parentPort?.once('message', () => {
  clearInterval(timer);
  db.close();
  parentPort?.close();
});
