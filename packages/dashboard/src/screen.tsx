import { useEffect, useRef, useState } from 'preact/hooks';
import type { InputEvent } from '@warren/api';
import { call, callBytes, sandboxPath } from './api.js';

/** Browser key names the VM's keyboard knows by another name (the rest: lower case, as they are). */
const KEYS: Record<string, string> = {
  Enter: 'Return',
  ArrowUp: 'up',
  ArrowDown: 'down',
  ArrowLeft: 'left',
  ArrowRight: 'right',
  PageUp: 'page_up',
  PageDown: 'page_down',
  ' ': 'space',
};
const NAMED = new Set(['Backspace', 'Tab', 'Escape', 'Delete', 'Insert', 'Home', 'End', ...Array.from({ length: 12 }, (_, i) => `F${i + 1}`)]);

/** A key pressed on the screen as the input the API takes, or null for one it does not send (a modifier alone). */
export function keyInput(e: { key: string; ctrlKey: boolean; altKey: boolean; metaKey: boolean }): InputEvent | null {
  if (e.ctrlKey || e.altKey || e.metaKey) return null;
  if (KEYS[e.key]) return { type: 'key', key: KEYS[e.key]! };
  if (NAMED.has(e.key)) return { type: 'key', key: e.key.toLowerCase() };
  if ([...e.key].length === 1) return { type: 'text', text: e.key };
  return null;
}

/**
 * A full VM's screen, read anew every second (GET .../screen, a PNG), with the pointer and the
 * keyboard: a click on the picture clicks there; keys typed while it has the focus are sent in
 * order (POST .../input answers once the guest has taken them, so keys typed meanwhile wait and
 * go together).
 */
export function Screen(p: { id: string }) {
  const [url, setUrl] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const img = useRef<HTMLImageElement>(null);
  const queue = useRef<InputEvent[]>([]);
  const sending = useRef(false);
  useEffect(() => {
    let stop = false;
    let current: string | null = null;
    const read = async (): Promise<void> => {
      while (!stop) {
        try {
          const next = URL.createObjectURL(await callBytes('GET', `${sandboxPath(p.id)}/screen`));
          if (current) URL.revokeObjectURL(current);
          current = next;
          setUrl(next);
          setError(null);
        } catch (e) {
          setError((e as Error).message);
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    };
    void read();
    return () => {
      stop = true;
      if (current) URL.revokeObjectURL(current);
    };
  }, [p.id]);
  const send = async (events: InputEvent[]): Promise<void> => {
    queue.current.push(...events);
    if (sending.current) return;
    sending.current = true;
    try {
      while (queue.current.length) {
        const batch = queue.current.splice(0, 500);
        await call('POST', `${sandboxPath(p.id)}/input`, { events: batch }).catch((e: unknown) => setError((e as Error).message));
      }
    } finally {
      sending.current = false;
    }
  };
  const click = (e: MouseEvent): void => {
    const el = img.current;
    if (!el) return;
    el.focus();
    const r = el.getBoundingClientRect();
    const x = Math.round(((e.clientX - r.left) / r.width) * el.naturalWidth);
    const y = Math.round(((e.clientY - r.top) / r.height) * el.naturalHeight);
    void send([{ type: 'mouse', x, y, button: 'left' }]);
  };
  const key = (e: KeyboardEvent): void => {
    const input = keyInput(e);
    if (!input) return;
    e.preventDefault();
    void send([input]);
  };
  return (
    <div class="screen">
      {error && <p class="error">{error}</p>}
      {url ? <img ref={img} src={url} alt="the VM's screen" tabIndex={0} onClick={click} onKeyDown={key} /> : <p class="sub">Reading the screen…</p>}
      <p class="sub">Click the screen to point there and give it the keyboard.</p>
    </div>
  );
}
