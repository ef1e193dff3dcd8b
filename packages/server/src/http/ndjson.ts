import type { ServerResponse } from 'node:http';
import type { ExecEvent } from '@warren/api';
import type { Command } from '@warren/edge';

/**
 * Streams a command as NDJSON from a byte offset until it ends. A client that goes away only
 * stops the stream: the command keeps running and can be re-read later.
 */
export function streamCommand(res: ServerResponse, cmd: Command, offset: number, withStart: boolean): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store', 'x-command-id': cmd.id });
  if (withStart) res.write(JSON.stringify({ type: 'start', commandId: cmd.id } satisfies ExecEvent) + '\n');
  return new Promise((resolve) => {
    let stop: () => void = () => undefined;
    const end = (): void => {
      stop();
      resolve();
    };
    res.on('close', end);
    stop = cmd.follow(offset, (ev) => {
      res.write(JSON.stringify(ev) + '\n');
      if (ev.type === 'exit' || ev.type === 'error') res.end();
    });
  });
}
