import { Duplex } from 'node:stream';
import { FrameDecoder, MAX_FRAME_BYTES, REPLY, REQ, encodeFields, encodeFrame } from '../../init/frame.js';

/** What every call on a simulated FnCall worker prints (then it exits 0). */
export const SIMULATED_FN_STDOUT = 'ok\n';

const EINVAL = 22;

/**
 * A connection to a simulated FnCall worker's init: it speaks the init protocol's FnCall (op F)
 * and answers each call at once with SIMULATED_FN_STDOUT and exit 0, as a worker's init would
 * once the edge's FnWorkers hand it the call; any other request fails (EINVAL). No process runs:
 * what a call costs here is the edge's (its queues, accounting, the frames), not a sandbox's.
 */
export function simulatedWorkerConnection(): Duplex {
  const decoder = new FrameDecoder(MAX_FRAME_BYTES);
  const conn = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, done) {
      try {
        for (const f of decoder.push(chunk)) {
          if (f.type === REQ.fn) {
            conn.push(encodeFrame(REPLY.stdout, Buffer.from(SIMULATED_FN_STDOUT)));
            conn.push(encodeFrame(REPLY.done, encodeFields([['c', '0']])));
          } else if (f.type !== REQ.signal && f.type !== REQ.data && f.type !== REQ.eof) {
            conn.push(
              encodeFrame(
                REPLY.failed,
                encodeFields([
                  ['n', String(EINVAL)],
                  ['m', 'a simulated FnCall worker runs only FnCalls'],
                ]),
              ),
            );
          }
        }
        done();
      } catch (e) {
        done(e instanceof Error ? e : new Error(String(e)));
      }
    },
  });
  return conn;
}
