import type { ServerResponse } from 'node:http';
import type { ExecEvent } from '@warren/api';
import { Hangup, type CommandStream } from '@warren/edge';

/**
 * Writes a line; resolves once the response has taken it (at once while its buffer has room,
 * else on drain), or when the response closed first. A stream is read only as fast as its
 * client reads, so nothing piles up in the response's buffer for a client that stops reading.
 */
export function writeLine(res: ServerResponse, line: string): Promise<void> | void {
  if (res.write(line) || res.destroyed) return;
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

/**
 * Streams a command's events as NDJSON until it ends, the next event read only once the client
 * has taken the last. A client that goes away only stops the stream: the command keeps running
 * and can be re-read later.
 */
export async function streamCommand(res: ServerResponse, s: CommandStream, withStart: boolean): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store', 'x-command-id': s.commandId });
  const start: ExecEvent = s.pid ? { type: 'start', commandId: s.commandId, pid: s.pid } : { type: 'start', commandId: s.commandId };
  if (withStart) res.write(JSON.stringify(start) + '\n');
  const it = s.events[Symbol.asyncIterator]();
  const hangup = new Hangup(res);
  try {
    for (;;) {
      const r = await hangup.race(it.next());
      if (r === 'gone' || r.done) break;
      await writeLine(res, JSON.stringify(r.value) + '\n');
      if (res.destroyed || r.value.type === 'exit' || r.value.type === 'error') break;
    }
  } finally {
    await it.return?.();
    res.end();
  }
}
