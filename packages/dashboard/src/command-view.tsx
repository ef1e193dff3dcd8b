import { useEffect, useRef, useState } from 'preact/hooks';
import type { ExecEvent } from '@warren/api';
import { MAX_SHOWN_OUTPUT, call, sandboxPath, streamEvents } from './api.js';

/** What a command view shows: its output as it comes, then how it ended. */
interface Shown {
  commandId: string | null;
  out: string;
  err: string;
  exit: string | null;
}

const keep = (s: string): string => (s.length > MAX_SHOWN_OUTPUT ? s.slice(s.length - MAX_SHOWN_OUTPUT) : s);

/**
 * A command's output, live: a new one run (`cmd`) or one followed (`follow`, from the start of
 * its output: a running one's as it comes, a finished one's with its exit); a kill button while it runs.
 */
export function CommandView(p: { id: string; cmd?: string; follow?: string; onEnd: () => void }) {
  const [shown, setShown] = useState<Shown>({ commandId: p.follow ?? null, out: '', err: '', exit: null });
  const [error, setError] = useState<string | null>(null);
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    // A command followed from the lists below: its output where it is seen.
    if (p.follow) pre.current?.scrollIntoView({ block: 'nearest' });
    const ac = new AbortController();
    const on = (e: ExecEvent): void =>
      setShown((s) => {
        switch (e.type) {
          case 'start':
            return { ...s, commandId: e.commandId };
          case 'stdout':
            return { ...s, out: keep(s.out + e.data) };
          case 'stderr':
            return { ...s, err: keep(s.err + e.data) };
          case 'exit': {
            const how = e.exitCode !== null ? `exit ${e.exitCode}` : `signal ${e.signal ?? '?'}`;
            return { ...s, exit: `${how} in ${Math.round(e.durationMs)} ms${e.killedBy ? `, killed by ${e.killedBy}` : ''}` };
          }
          case 'error':
            setError(e.error.message);
            return s;
        }
      });
    const run = p.follow
      ? streamEvents('GET', `${sandboxPath(p.id)}/commands/${encodeURIComponent(p.follow)}?offset=0`, undefined, on, ac.signal)
      : streamEvents('POST', `${sandboxPath(p.id)}/exec`, { cmd: p.cmd, timeoutMs: 600_000 }, on, ac.signal);
    run.then(p.onEnd, (e: unknown) => setError((e as Error).message));
    return () => ac.abort();
  }, [p.id, p.cmd, p.follow]);
  useEffect(() => {
    if (pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [shown.out]);
  const kill = (): void => {
    if (shown.commandId)
      call('POST', `${sandboxPath(p.id)}/commands/${encodeURIComponent(shown.commandId)}/kill`, { signal: 'SIGKILL' }).catch((e: unknown) =>
        setError((e as Error).message),
      );
  };
  return (
    <div class="result" data-command={shown.commandId ?? ''}>
      <div class="sub">
        {shown.exit ?? 'running…'} {!shown.exit && shown.commandId && <button onClick={kill}>Kill</button>}
      </div>
      {error && <p class="error">{error}</p>}
      <pre class="stdout" ref={pre}>
        {shown.out}
      </pre>
      {shown.err && <pre class="stderr">{shown.err}</pre>}
    </div>
  );
}
