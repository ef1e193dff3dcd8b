import { connect, type Socket } from 'node:net';
import { WarrenError } from '@warren/api';

/** How long the node waits for a sandbox's port to take a connection (ms). */
export const PORT_CONNECT_MS = 10_000;

/**
 * A TCP connection from the node to `port` of a sandbox at `host` (its address on the node's
 * link): resolves once connected; `unavailable` when nothing listens there or it does not answer
 * within `timeoutMs`. The node dials, never its caller: the address is the node's own.
 */
export function dialSandboxPort(host: string, port: number, timeoutMs = PORT_CONNECT_MS): Promise<Socket> {
  if (!Number.isInteger(port) || port < 1 || port > 65535) return Promise.reject(new WarrenError('invalid_argument', `port ${port} is not a TCP port`));
  return new Promise((resolve, reject) => {
    const s = connect({ host, port });
    const timer = setTimeout(() => s.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })), timeoutMs);
    s.once('connect', () => {
      clearTimeout(timer);
      s.removeListener('error', fail);
      // Its user sees an error as the close that follows it: none may go unheard.
      s.on('error', () => undefined);
      // Paused, as a tunnel's stream comes (EdgeApi.openPort): nothing is read before its reader is there.
      s.pause();
      resolve(s);
    });
    const fail = (e: NodeJS.ErrnoException): void => {
      clearTimeout(timer);
      reject(
        new WarrenError(
          'unavailable',
          e.code === 'ECONNREFUSED' ? `nothing listens on port ${port} in the sandbox` : `port ${port} in the sandbox did not answer`,
          { port },
          { cause: e },
        ),
      );
    };
    s.once('error', fail);
  });
}
