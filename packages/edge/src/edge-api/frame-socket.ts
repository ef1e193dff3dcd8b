import type { Socket } from 'node:net';
import { FRAME, MAX_DATA_FRAME, frameHeader } from './frames.js';

/** Writes `b`: true when the socket takes more at once, else a promise of whether it drained (false: it closed first). */
export function write(socket: Socket, b: Buffer): Promise<boolean> | true {
  if (socket.write(b)) return true;
  return new Promise((resolve) => {
    const done = (ok: boolean) => (): void => {
      socket.off('drain', onDrain);
      socket.off('close', onClose);
      resolve(ok);
    };
    const onDrain = done(true);
    const onClose = done(false);
    socket.once('drain', onDrain);
    socket.once('close', onClose);
  });
}

/** The bytes of `chunk` as `data` frames of at most MAX_DATA_FRAME, each after the socket drained (the bytes are not copied). */
export async function writeData(socket: Socket, chunk: Uint8Array): Promise<boolean> {
  const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  for (let at = 0; at < b.length; at += MAX_DATA_FRAME) {
    const part = b.subarray(at, at + MAX_DATA_FRAME);
    socket.write(frameHeader(FRAME.data, part.length));
    const ok = write(socket, part);
    if (ok !== true && !(await ok)) return false;
  }
  return true;
}
