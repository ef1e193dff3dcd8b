import type { Duplex } from 'node:stream';

/**
 * Bytes both ways between two connections, with back-pressure each way (a TCP proxy's core). An
 * end goes on after what was written before it; an error on either, or one closed before it
 * ended what it sent, destroys the other (a close after an end waits for the other's written
 * bytes to go).
 */
export function splice(a: Duplex, b: Duplex): void {
  const kill = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on('error', kill);
  b.on('error', kill);
  a.once('close', () => {
    if (!b.writableEnded) b.destroy();
  });
  b.once('close', () => {
    if (!a.writableEnded) a.destroy();
  });
  a.pipe(b);
  b.pipe(a);
}
