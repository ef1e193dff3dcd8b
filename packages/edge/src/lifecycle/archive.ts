import { WarrenError } from '@warren/api';
import * as ch from '../init/channel.js';
import { failure, finishCall } from '../init/call.js';
import { REPLY, REQ } from '../init/frame.js';
import { PLATFORM_MOUNT } from '../init/platform.js';
import type { AgentConnect } from '../init/call.js';

const BUSYBOX = `${PLATFORM_MOUNT}/busybox`;

/** Extracts a tar stream into a directory (made if missing) with the platform's own tar. */
export async function extractArchive(sock: AgentConnect, dir: string, body: AsyncIterable<Buffer>, o: { user?: string; maxBytes: number }): Promise<void> {
  await ch.makeDir(sock, dir, o.user);
  const { call } = await ch.startCommand(sock, {
    argv: [BUSYBOX, 'tar', '-x', '-f', '-', '-C', dir],
    env: [],
    user: 'root',
    stdin: true,
    timeoutMs: 3_600_000,
  });
  let size = 0;
  let stderr = '';
  const pump = async (): Promise<void> => {
    for await (const chunk of body) {
      size += chunk.length;
      if (size > o.maxBytes) {
        call.sendFields(REQ.signal, [['s', '9']]);
        throw new WarrenError('payload_too_large', `archive is larger than ${o.maxBytes} bytes`);
      }
      if (!call.send(REQ.data, chunk)) await call.drain();
    }
    call.send(REQ.eof);
  };
  const collect = finishCall(call, { path: dir }, (f) => {
    if (f.type === REPLY.stderr && stderr.length < 4096) stderr += f.payload.toString();
  });
  const [pumped, done] = await Promise.allSettled([pump(), collect]);
  if (pumped.status === 'rejected') throw pumped.reason;
  if (done.status === 'rejected') throw done.reason;
  if (done.value.get('c')?.[0] !== '0')
    throw new WarrenError('invalid_argument', `could not extract the archive: ${stderr.trim().slice(0, 500) || 'tar failed'}`, { path: dir });
}

/** A tar stream of a directory. */
export async function archiveStream(sock: AgentConnect, dir: string): Promise<AsyncIterable<Buffer>> {
  const st = await ch.statPath(sock, dir);
  if (st.type !== 'dir') throw new WarrenError('invalid_argument', `${dir} is not a directory`, { path: dir });
  const { call } = await ch.startCommand(sock, {
    argv: [BUSYBOX, 'tar', '-c', '-f', '-', '-C', dir, '.'],
    env: [],
    user: 'root',
    stdin: false,
    timeoutMs: 3_600_000,
  });
  return (async function* () {
    try {
      for (;;) {
        const f = await call.next();
        if (f === null) throw new WarrenError('unavailable', 'the archive was cut short');
        if (f.type === REPLY.stdout) yield f.payload;
        else if (f.type === REPLY.done) return;
        else if (f.type === REPLY.failed) throw failure(f);
      }
    } finally {
      call.close();
    }
  })();
}
