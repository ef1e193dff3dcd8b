import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, call, sandboxPath, type CommandInfo, type LifecycleEvent, type Sandbox } from './api.js';
import { CommandView } from './command-view.js';
import { Files } from './files.js';
import { Events, RecentCommands } from './history.js';
import { Screen } from './screen.js';
import { ago, labelsText, mib, until } from './format.js';
import { go } from './route.js';
import { UsageOverTime, addSample, type UsageSamples } from './usage.js';
import type { Terminal as TerminalView } from './terminal.js';

/** The terminal, loaded when first opened (xterm is most of the dashboard's code). */
function LazyTerminal(p: { id: string; onClose: () => void }) {
  const [T, setT] = useState<typeof TerminalView | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    import('./terminal.js').then(
      (m) => setT(() => m.Terminal),
      (e: unknown) => setError(`the terminal could not be loaded: ${String(e)}`),
    );
  }, []);
  if (error) return <p class="error">{error}</p>;
  return T ? <T {...p} /> : <p class="sub">Loading the terminal…</p>;
}

/** One sandbox: its spec and usage, its commands (running and recent), a command box, a terminal, its events; pause, resume, delete. */
export function SandboxPage(p: { id: string }) {
  const [sb, setSb] = useState<Sandbox | null>(null);
  const [gone, setGone] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [commands, setCommands] = useState<CommandInfo[]>([]);
  const [events, setEvents] = useState<LifecycleEvent[]>([]);
  /** The last event's seq read: each load reads only those after it. */
  const seen = useRef(0);
  const [cmd, setCmd] = useState('');
  const [made, setMade] = useState<{ text: string; link: string | null } | null>(null);
  /** The command shown live: one run from the box (a new key each run), or a running one followed. */
  const [shown, setShown] = useState<{ key: number; cmd?: string; follow?: string } | null>(null);
  const [terminal, setTerminal] = useState(false);
  const [usage, setUsage] = useState<UsageSamples>({ atMs: [], cores: [], memoryMiB: [] });
  const load = async (): Promise<void> => {
    try {
      const [s, more] = await Promise.all([
        call<Sandbox>('GET', sandboxPath(p.id)),
        call<{ events: LifecycleEvent[] }>('GET', `${sandboxPath(p.id)}/events?since=${seen.current}`).catch(() => null),
      ]);
      setSb(s);
      setError(null);
      if (s.state === 'running' || s.state === 'paused') setUsage((u) => addSample(u, Date.now(), s.usage));
      if (more?.events.length) {
        seen.current = Math.max(seen.current, more.events.at(-1)!.seq);
        // Two loads at once read the same ones: each event is kept once.
        setEvents((had) => [...had, ...more.events.filter((e) => e.seq > (had.at(-1)?.seq ?? 0))]);
      }
      if (s.state === 'running' || s.state === 'paused')
        setCommands((await call<{ commands: CommandInfo[] }>('GET', `${sandboxPath(p.id)}/commands?finished=1`).catch(() => ({ commands: [] }))).commands);
    } catch (e) {
      if (e instanceof ApiError && e.code === 'not_found') setGone('This sandbox is gone: it was deleted, or it is not one this key may see.');
      else setError((e as Error).message);
    }
  };
  useEffect(() => {
    void load();
    const t = setInterval(() => void load(), 3000);
    return () => clearInterval(t);
  }, [p.id]);
  const act = async (verb: 'pause' | 'resume' | 'delete'): Promise<void> => {
    try {
      if (verb === 'delete') {
        await call('DELETE', sandboxPath(p.id));
        go('sandboxes');
        return;
      }
      await call('POST', `${sandboxPath(p.id)}/${verb}`);
      await load();
    } catch (e) {
      setError((e as Error).message);
    }
  };
  /** Forks it once (its files as they are now) or keeps them as a named snapshot; says what was made. */
  const make = async (what: 'fork' | 'snapshot'): Promise<void> => {
    try {
      if (what === 'fork') {
        const r = await call<{ sandboxes: Sandbox[]; errors: Array<{ message: string }> }>('POST', `${sandboxPath(p.id)}/fork`, { count: 1 });
        if (r.errors.length) throw new Error(r.errors[0]!.message);
        setMade({ text: 'forked into', link: r.sandboxes[0]!.id });
      } else {
        const name = prompt('Name of the snapshot (empty: one is made up)') ?? '';
        const r = await call<{ name: string }>('POST', `${sandboxPath(p.id)}/snapshots`, name.trim() ? { name: name.trim() } : {});
        setMade({ text: `snapshot ${r.name} made`, link: null });
      }
      setError(null);
    } catch (e) {
      setError((e as Error).message);
    }
  };
  const run = (e: Event): void => {
    e.preventDefault();
    setShown({ key: Date.now(), cmd });
  };
  if (gone)
    return (
      <section>
        <p class="error" role="alert">
          {gone}
        </p>
        <a href="#/sandboxes">Back to the sandboxes</a>
      </section>
    );
  if (!sb) return <section>{error ? <p class="error">{error}</p> : <p>Loading…</p>}</section>;
  const live = sb.state === 'running' || sb.state === 'paused';
  const running = commands.filter((c) => c.finishedAt === null);
  return (
    <section class="sandbox">
      <h2>
        {sb.id} <span class={`state ${sb.state}`}>{sb.state}</span>
      </h2>
      <div class="buttons">
        {sb.state === 'running' && <button onClick={() => void act('pause')}>Pause</button>}
        {sb.state === 'paused' && <button onClick={() => void act('resume')}>Resume</button>}
        {live && <button onClick={() => void make('fork')}>Fork</button>}
        {live && <button onClick={() => void make('snapshot')}>Snapshot</button>}
        {live && (
          <button class="danger" onClick={() => confirm(`Delete ${sb.id}?`) && void act('delete')}>
            Delete
          </button>
        )}
      </div>
      {made && (
        <p class="status" role="status">
          {made.text}{' '}
          {made.link && (
            <a class="made" href={`#/sandboxes/${encodeURIComponent(made.link)}`}>
              {made.link}
            </a>
          )}
        </p>
      )}
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <dl class="spec">
        <dt>Image</dt>
        <dd>{sb.image}</dd>
        <dt>Backend / node</dt>
        <dd>
          {sb.backend} on {sb.node}
        </dd>
        <dt>Resources</dt>
        <dd>
          {sb.resources.cpu} CPU ({sb.resources.cpuClass}), {sb.resources.memoryMiB} MiB (requests {sb.resources.memoryRequestMiB}), {sb.resources.pids} pids
          {sb.resources.diskMiB !== null && `, ${sb.resources.diskMiB} MiB disk`}
        </dd>
        <dt>Labels</dt>
        <dd>{labelsText(sb.labels) || '—'}</dd>
        <dt>Lease</dt>
        <dd>{sb.lease ?? '—'}</dd>
        <dt>Created</dt>
        <dd>{ago(sb.createdAt)}</dd>
        <dt>{sb.end ? 'Ended' : 'Expires'}</dt>
        <dd class="end">
          {sb.end ? `${sb.end.reason} by the ${sb.end.by}${sb.end.detail ? `: ${sb.end.detail}` : ''} (${ago(sb.end.at)})` : until(sb.expiresAt)}
        </dd>
        <dt>Usage</dt>
        <dd>
          {sb.usage.cpuRecent.toFixed(2)} cores now, {sb.usage.cpuSeconds.toFixed(1)} s in all; {mib(sb.usage.memoryBytes)}
          {sb.usage.swapBytes > 0 && ` (${mib(sb.usage.swapBytes)} in swap)`}; idle {sb.usage.idleSeconds} s
        </dd>
      </dl>
      {(sb.state === 'running' || sb.state === 'paused') && <UsageOverTime samples={usage} />}
      {live && (
        <>
          <h3>Run a command</h3>
          <form class="run" onSubmit={run}>
            <input name="cmd" placeholder="ls -la /" value={cmd} onInput={(e) => setCmd(e.currentTarget.value)} />
            <button type="submit" disabled={!cmd}>
              Run
            </button>
          </form>
          {shown && <CommandView key={shown.key} id={sb.id} cmd={shown.cmd} follow={shown.follow} onEnd={() => void load()} />}
          {sb.backend === 'vm' && (
            <>
              <h3>Screen</h3>
              {sb.state === 'paused' ? <p class="status">The VM is paused: resume it to see its screen.</p> : <Screen id={sb.id} />}
            </>
          )}
          <h3>Terminal</h3>
          {sb.state === 'paused' ? (
            <p class="status">
              The sandbox is paused: resume it to open a terminal. <button onClick={() => void act('resume')}>Resume</button>
            </p>
          ) : terminal ? (
            <LazyTerminal id={sb.id} onClose={() => void load()} />
          ) : (
            <button onClick={() => setTerminal(true)}>Open a terminal</button>
          )}
          <h3>Files</h3>
          <Files id={sb.id} />
          <h3>Commands running</h3>
          <ul class="commands">
            {running.map((c) => (
              <li key={c.commandId}>
                <code>{Array.isArray(c.cmd) ? c.cmd.join(' ') : c.cmd}</code> pid {c.pid}
                {c.pty && ' (terminal)'} · {ago(c.startedAt)}{' '}
                {!c.pty && (
                  <button name="follow" onClick={() => setShown({ key: Date.now(), follow: c.commandId })}>
                    Output
                  </button>
                )}
              </li>
            ))}
            {running.length === 0 && <li class="sub">none</li>}
          </ul>
          <h3>Recent commands</h3>
          <RecentCommands commands={commands} onOutput={(id) => setShown({ key: Date.now(), follow: id })} />
        </>
      )}
      <h3>Events</h3>
      <Events events={events} />
    </section>
  );
}
