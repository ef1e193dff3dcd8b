import { z } from 'zod';

/**
 * One input event for a full VM's display (`POST /v1/sandboxes/{id}/input`):
 * - `key`: presses and releases `key`, an X keysym name (`Return`, `BackSpace`, `Up`, `F5`, `a`)
 *   or a combination with `+` (`ctrl+c`, `ctrl+shift+t`); the guest's keyboard is a US layout.
 * - `text`: types `text` as keys on that layout (printable ASCII, newline and tab).
 * - `mouse`: moves the pointer to `x`,`y` (pixels from the top left, absolute) when given, then
 *   with `button` clicks it (`action` click, the default), or only presses or releases it.
 */
export const InputEvent = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('key'), key: z.string().min(1).max(64) }),
  z.strictObject({ type: z.literal('text'), text: z.string().max(10_000) }),
  z.strictObject({
    type: z.literal('mouse'),
    x: z.number().int().min(0).max(16_383).optional(),
    y: z.number().int().min(0).max(16_383).optional(),
    button: z.enum(['left', 'middle', 'right', 'wheel-up', 'wheel-down']).optional(),
    action: z.enum(['click', 'down', 'up']).optional(),
  }),
]);
export type InputEvent = z.infer<typeof InputEvent>;

/**
 * The most keystrokes one input request may type: every character of its `text` events and every
 * `key` event count one. Each becomes a few of the display's device events, sent in order as the
 * guest takes them; past this a request is refused rather than held on the node for minutes.
 */
export const MAX_INPUT_KEYSTROKES = 10_000;

/**
 * Keys, text and pointer events for a full VM's display, in order; MAX_INPUT_KEYSTROKES at most.
 * They go as fast as the guest handles them, and the request is answered once it has handled them
 * all: the guest acknowledges with its keyboard's Num Lock light, so Num Lock is pressed twice
 * after every ten keys or so, where the events change device and at the end (its state stays).
 */
export const InputRequest = z.strictObject({
  events: z
    .array(InputEvent)
    .min(1)
    .max(1000)
    .superRefine((events, ctx) => {
      let keystrokes = 0;
      for (const e of events) keystrokes += e.type === 'text' ? e.text.length : e.type === 'key' ? 1 : 0;
      if (keystrokes > MAX_INPUT_KEYSTROKES)
        ctx.addIssue({
          code: 'custom',
          message: `the events type ${keystrokes} keystrokes (text characters and keys); one request types ${MAX_INPUT_KEYSTROKES} at most`,
        });
    })
    .describe(
      `in order, answered once the guest has handled them (Num Lock is pressed twice after every ten keys or so and at the end: its light is the guest's acknowledgement); their text characters and key events together ${MAX_INPUT_KEYSTROKES} at most`,
    ),
});
export type InputRequest = z.infer<typeof InputRequest>;
