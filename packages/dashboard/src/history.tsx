import type { ComponentChild } from 'preact';
import type { CommandInfo, LifecycleEvent } from './api.js';
import { ago } from './format.js';

const link = (id: string): ComponentChild => (
  <a key={id} class="child" href={`#/sandboxes/${encodeURIComponent(id)}`}>
    {id}
  </a>
);

/** What an event says beyond its type: an end's reason and whose doing, a fork's children, a snapshot's name, a pause's cause. */
function says(e: LifecycleEvent): ComponentChild {
  if (e.end) return `${e.end.reason} by the ${e.end.by}${e.end.detail ? `: ${e.end.detail}` : ''}`;
  if (e.children) return <>into {e.children.flatMap((c, i) => (i ? [', ', link(c)] : [link(c)]))}</>;
  if (e.snapshot) return <code>{e.snapshot}</code>;
  if (e.reason === 'memory') return 'its node ran short of memory and it was idle the longest';
  return '';
}

/** A sandbox's lifecycle events, newest first: when, what, and what it says. */
export function Events(p: { events: LifecycleEvent[] }) {
  if (!p.events.length) return <p class="sub">none kept</p>;
  return (
    <table class="listing events">
      <tbody>
        {[...p.events].reverse().map((e) => (
          <tr key={e.seq} data-type={e.type}>
            <td title={e.at}>{new Date(e.at).toLocaleString()}</td>
            <td class="sub">{ago(e.at)}</td>
            <td>
              <strong>{e.type}</strong>
            </td>
            <td class="says">{says(e)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

const cmdText = (c: CommandInfo): string => (Array.isArray(c.cmd) ? c.cmd.join(' ') : c.cmd);

/** Finished commands the node keeps, newest first: how each ended and when, and a button to read its output again. */
export function RecentCommands(p: { commands: CommandInfo[]; onOutput: (commandId: string) => void }) {
  const done = p.commands.filter((c) => c.finishedAt !== null).sort((a, b) => b.finishedAt!.localeCompare(a.finishedAt!));
  if (!done.length) return <p class="sub">none kept</p>;
  return (
    <ul class="commands recent">
      {done.map((c) => (
        <li key={c.commandId} data-command={c.commandId}>
          <code>{cmdText(c)}</code> <span class="exit">{c.exitCode !== null ? `exit ${c.exitCode}` : c.signal ? `signal ${c.signal}` : 'ended'}</span> ·{' '}
          {ago(c.finishedAt)}{' '}
          {!c.pty && (
            <button name="output" onClick={() => p.onOutput(c.commandId)}>
              Output
            </button>
          )}
        </li>
      ))}
    </ul>
  );
}
