import '@xterm/xterm/css/xterm.css';
import { FitAddon } from '@xterm/addon-fit';
import { Terminal as Xterm } from '@xterm/xterm';
import { useEffect, useRef, useState } from 'preact/hooks';
import { getKey, sandboxPath } from './api.js';

/** The key as the subprotocol a browser's WebSocket can carry (the server's ws-auth.ts). */
const bearer = (key: string): string => `warren.bearer.${btoa(key).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')}`;

/**
 * A login shell on a new terminal in the sandbox (GET /v1/sandboxes/{id}/pty over a WebSocket):
 * keystrokes go as binary messages, the size follows the element's, the shell's end closes it.
 */
export function Terminal(p: { id: string; onClose: () => void }) {
  const el = useRef<HTMLDivElement>(null);
  const [state, setState] = useState('connecting');
  useEffect(() => {
    const term = new Xterm({ cursorBlink: true, fontSize: 13, convertEol: false });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(el.current!);
    fit.fit();
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${scheme}//${location.host}${sandboxPath(p.id)}/pty?cols=${term.cols}&rows=${term.rows}`, ['warren', bearer(getKey() ?? '')]);
    ws.binaryType = 'arraybuffer';
    const encoder = new TextEncoder();
    ws.onopen = () => setState('open');
    ws.onmessage = (m: MessageEvent<ArrayBuffer | string>) => {
      if (typeof m.data !== 'string') return term.write(new Uint8Array(m.data));
      const msg = JSON.parse(m.data) as { type?: string; exitCode?: number | null; signal?: string | null };
      if (msg.type === 'exit') setState(`ended (exit ${msg.exitCode ?? msg.signal ?? '?'})`);
    };
    ws.onclose = (e) => {
      setState((s) => (s.startsWith('ended') ? s : e.code === 1000 ? 'closed' : `closed (${e.code}${e.reason ? `: ${e.reason}` : ''})`));
      p.onClose();
    };
    ws.onerror = () => setState('the terminal could not connect (is the sandbox running?)');
    const input = term.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(encoder.encode(d)));
    const resize = term.onResize(({ cols, rows }) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ type: 'resize', cols, rows })));
    const ro = new ResizeObserver(() => fit.fit());
    ro.observe(el.current!);
    term.focus();
    return () => {
      ro.disconnect();
      input.dispose();
      resize.dispose();
      ws.close();
      term.dispose();
    };
  }, [p.id]);
  return (
    <div class="terminal-box">
      <div class="sub" data-terminal-state={state}>
        terminal: {state}
      </div>
      <div class="term-host" ref={el} />
    </div>
  );
}
