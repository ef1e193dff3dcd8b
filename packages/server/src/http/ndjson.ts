import type { ServerResponse } from 'node:http';
import type { ExecEvent } from '@warren/api';
import type { CommandStream } from '@warren/edge';

/**
 * Streams a command's events as NDJSON until it ends. A client that goes away only stops the
 * stream: the command keeps running and can be re-read later.
 */
export async function streamCommand(res: ServerResponse, s: CommandStream, withStart: boolean): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store', 'x-command-id': s.commandId });
  const start: ExecEvent = s.pid ? { type: 'start', commandId: s.commandId, pid: s.pid } : { type: 'start', commandId: s.commandId };
  if (withStart) res.write(JSON.stringify(start) + '\n');
  const it = s.events[Symbol.asyncIterator]();
  const gone = new Promise<'gone'>((resolve) => res.once('close', () => resolve('gone')));
  try {
    for (;;) {
      const r = await Promise.race([it.next(), gone]);
      if (r === 'gone' || r.done) break;
      res.write(JSON.stringify(r.value) + '\n');
      if (r.value.type === 'exit' || r.value.type === 'error') break;
    }
  } finally {
    await it.return?.();
    res.end();
  }
}
