import { connect, type Socket } from 'node:net';

/** One init protocol frame, written by hand (docs/init-protocol.md): length, type, payload. */
export function rawFrame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(5);
  h.writeUInt32LE(payload.length + 1);
  h.write(type, 4, 'latin1');
  return Buffer.concat([h, payload]);
}

/** A request's fields: a key byte, a 32-bit length, the value (repeat). */
export function rawFields(...kv: Array<[string, string]>): Buffer {
  return Buffer.concat(
    kv.map(([k, v]) => {
      const h = Buffer.alloc(5);
      h.write(k, 0, 'latin1');
      h.writeUInt32LE(Buffer.byteLength(v), 1);
      return Buffer.concat([h, Buffer.from(v)]);
    }),
  );
}

/** A raw connection to an init's socket: `types()` answers the frame types read so far once a `y` or the end came. */
export function rawInit(socketPath: string): Promise<{ s: Socket; types: () => Promise<string[]> }> {
  return new Promise((resolve, reject) => {
    const s = connect(socketPath);
    let held = Buffer.alloc(0);
    const types: string[] = [];
    let wake: (() => void) | null = null;
    s.on('data', (d: Buffer) => {
      held = Buffer.concat([held, d]);
      while (held.length >= 5 && held.length >= 4 + held.readUInt32LE(0)) {
        types.push(String.fromCharCode(held[4]!));
        held = held.subarray(4 + held.readUInt32LE(0));
      }
      wake?.();
    });
    s.on('close', () => wake?.());
    s.once('error', reject);
    const until = (): Promise<string[]> =>
      new Promise((r) => {
        const check = (): void => (types.at(-1) === 'y' || s.closed ? r(types.splice(0)) : void (wake = check));
        check();
      });
    s.once('connect', () => resolve({ s, types: until }));
  });
}
