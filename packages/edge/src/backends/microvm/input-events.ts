import { WarrenError, type InputEvent } from '@warren/api';

/** One QMP `input-send-event` call's events (delivered to the guest together, then a sync). */
export type QmpInputBatch = Array<Record<string, unknown>>;

/**
 * One keystroke (a key or chord: its presses, then its releases) or one mouse event (a move, then
 * its button): the virtio device that takes it and its batches in order, sent together so that no
 * key is held longer than its batches take (a key held while the sender waits would repeat).
 */
export interface InputStroke {
  device: 'keyboard' | 'tablet';
  batches: QmpInputBatch[];
}

/** The events a stroke puts into its device's queue in the guest: each batch's, and the sync that ends each (pure). */
export function strokeEvents(s: InputStroke): number {
  return s.batches.reduce((n, b) => n + b.length + 1, 0);
}

/** The largest value of QEMU's absolute pointer axes (the tablet's range). */
const ABS_MAX = 0x7fff;

/** Keysym names (lower case) that are not a single character, as QEMU's key codes. */
const NAMED_KEYS: Record<string, string> = {
  return: 'ret',
  enter: 'ret',
  kp_enter: 'kp_enter',
  space: 'spc',
  tab: 'tab',
  escape: 'esc',
  esc: 'esc',
  backspace: 'backspace',
  delete: 'delete',
  insert: 'insert',
  home: 'home',
  end: 'end',
  page_up: 'pgup',
  prior: 'pgup',
  page_down: 'pgdn',
  next: 'pgdn',
  up: 'up',
  down: 'down',
  left: 'left',
  right: 'right',
  ctrl: 'ctrl',
  control: 'ctrl',
  control_l: 'ctrl',
  control_r: 'ctrl_r',
  shift: 'shift',
  shift_l: 'shift',
  shift_r: 'shift_r',
  alt: 'alt',
  alt_l: 'alt',
  alt_r: 'alt_r',
  super: 'meta_l',
  super_l: 'meta_l',
  meta: 'meta_l',
  menu: 'menu',
  caps_lock: 'caps_lock',
  print: 'print',
  ...Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`f${i + 1}`, `f${i + 1}`])),
};

/** Characters that have a key of their own on a US keyboard, and those typed with shift (pure table). */
const PLAIN: Record<string, string> = {
  ' ': 'spc',
  '\n': 'ret',
  '\t': 'tab',
  '-': 'minus',
  '=': 'equal',
  '[': 'bracket_left',
  ']': 'bracket_right',
  '\\': 'backslash',
  ';': 'semicolon',
  "'": 'apostrophe',
  '`': 'grave_accent',
  ',': 'comma',
  '.': 'dot',
  '/': 'slash',
};
const SHIFTED: Record<string, string> = {
  '!': '1',
  '@': '2',
  '#': '3',
  $: '4',
  '%': '5',
  '^': '6',
  '&': '7',
  '*': '8',
  '(': '9',
  ')': '0',
  _: 'minus',
  '+': 'equal',
  '{': 'bracket_left',
  '}': 'bracket_right',
  '|': 'backslash',
  ':': 'semicolon',
  '"': 'apostrophe',
  '~': 'grave_accent',
  '<': 'comma',
  '>': 'dot',
  '?': 'slash',
};

/** The key code and whether shift is held for one character; null for one a US keyboard cannot type. */
function charKey(c: string): { code: string; shift: boolean } | null {
  if (/^[a-z0-9]$/.test(c)) return { code: c, shift: false };
  if (/^[A-Z]$/.test(c)) return { code: c.toLowerCase(), shift: true };
  if (PLAIN[c]) return { code: PLAIN[c], shift: false };
  if (SHIFTED[c]) return { code: SHIFTED[c], shift: true };
  return null;
}

const key = (code: string, down: boolean): Record<string, unknown> => ({ type: 'key', data: { down, key: { type: 'qcode', data: code } } });

/** Presses the keys in order and releases them in reverse, each change a batch of its own (a guest sees every one). */
function chord(codes: string[]): InputStroke {
  return { device: 'keyboard', batches: [...codes.map((c) => [key(c, true)]), ...[...codes].reverse().map((c) => [key(c, false)])] };
}

/** The most keys one chord presses at once (a stroke's events must fit in the guest's queue at once: see input-flow.ts). */
const MAX_CHORD_KEYS = 8;

/** A key name or chord (`ctrl+shift+t`) as key codes, modifiers first; invalid_argument for a name it does not know or too many keys. */
export function keyCodes(name: string): string[] {
  const parts = name.length > 1 && name.includes('+') ? name.split('+') : [name];
  if (parts.length > MAX_CHORD_KEYS)
    throw new WarrenError('invalid_argument', `a chord holds ${MAX_CHORD_KEYS} keys at most: ${JSON.stringify(name)}`, { key: name });
  return parts.flatMap((p) => {
    const named = NAMED_KEYS[p.toLowerCase()];
    if (named) return [named];
    const c = p.length === 1 ? charKey(p) : null;
    if (!c) throw new WarrenError('invalid_argument', `no key named ${JSON.stringify(p)} (X keysym names such as Return, BackSpace, ctrl+c)`, { key: name });
    return c.shift ? ['shift', c.code] : [c.code];
  });
}

/** invalid_argument unless every event can be sent: keys it knows, text a US keyboard types, the pointer on the screen (pure). */
function check(events: InputEvent[], screen: { width: number; height: number }): void {
  for (const e of events) {
    if (e.type === 'key') keyCodes(e.key);
    else if (e.type === 'text') {
      for (const ch of e.text)
        if (!charKey(ch)) throw new WarrenError('invalid_argument', `text holds ${JSON.stringify(ch)}, which the display's US keyboard cannot type`);
    } else if ((e.x ?? 0) >= screen.width || (e.y ?? 0) >= screen.height)
      throw new WarrenError('invalid_argument', `the pointer's place (${e.x ?? '-'}, ${e.y ?? '-'}) is off the ${screen.width}x${screen.height} screen`);
  }
}

/**
 * The API's input events as strokes of QMP input-send-event batches, in order, made one at a time
 * as the caller takes them (pure; whatever the request's size, only the stroke being sent is
 * held): keys and text as presses and releases on a US layout; a mouse event as a pointer move
 * (absolute: the screen's `width`×`height` pixels scaled to the tablet's range), then its button
 * pressed and/or released. Every event is checked first, here: a request with one it cannot send
 * throws invalid_argument and sends nothing.
 */
export function inputStrokes(events: InputEvent[], screen: { width: number; height: number }): Generator<InputStroke, void, undefined> {
  check(events, screen);
  return strokes(events, screen);
}

/** inputStrokes' strokes, made as they are taken (its events checked). */
function* strokes(events: InputEvent[], screen: { width: number; height: number }): Generator<InputStroke, void, undefined> {
  for (const e of events) {
    if (e.type === 'key') yield chord(keyCodes(e.key));
    else if (e.type === 'text') {
      for (const ch of e.text) {
        const c = charKey(ch)!;
        yield chord(c.shift ? ['shift', c.code] : [c.code]);
      }
    } else {
      const batches: QmpInputBatch[] = [];
      if (e.x !== undefined || e.y !== undefined) {
        const axes: QmpInputBatch = [];
        if (e.x !== undefined) axes.push({ type: 'abs', data: { axis: 'x', value: Math.round((e.x * ABS_MAX) / Math.max(1, screen.width - 1)) } });
        if (e.y !== undefined) axes.push({ type: 'abs', data: { axis: 'y', value: Math.round((e.y * ABS_MAX) / Math.max(1, screen.height - 1)) } });
        batches.push(axes);
      }
      if (e.button) {
        const btn = (down: boolean): QmpInputBatch => [{ type: 'btn', data: { down, button: e.button } }];
        const action = e.action ?? 'click';
        if (action !== 'up') batches.push(btn(true));
        if (action !== 'down') batches.push(btn(false));
      }
      if (batches.length) yield { device: 'tablet', batches };
    }
  }
}
