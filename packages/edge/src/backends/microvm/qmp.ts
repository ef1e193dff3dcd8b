import { connect, type Socket } from 'node:net';
import { WarrenError } from '@warren/api';

/** The most bytes of one QMP line kept (QEMU's answers to what Warren asks are small). */
const MAX_LINE = 1 << 20;

/**
 * A QMP connection to one QEMU (its `-qmp unix:` socket): the greeting and capabilities
 * negotiated, then one command at a time, each answered in order; events are skipped.
 */
export class Qmp {
  private buf = '';
  private waiting: Array<{ resolve: (v: unknown) => void; reject: (e: Error) => void }> = [];
  private closed: Error | null = null;

  private constructor(private readonly socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => this.onData(d));
    socket.on('error', (e) => this.fail(e));
    socket.on('close', () => this.fail(new Error('QMP connection closed')));
  }

  /**
   * Connects and negotiates (the greeting, then `qmp_capabilities`). QEMU serves one client at a
   * time and drops one that comes while it has not yet seen the last one go (the connection is
   * reset): that is tried again, for a second at most.
   */
  static async open(path: string, timeoutMs = 10_000): Promise<Qmp> {
    for (let tries = 0; ; tries++) {
      try {
        return await Qmp.openOnce(path, timeoutMs);
      } catch (e) {
        const code = ((e as Error).cause as NodeJS.ErrnoException | undefined)?.code;
        if (tries >= 50 || (code !== 'ECONNRESET' && code !== 'EPIPE')) throw e;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  }

  private static async openOnce(path: string, timeoutMs: number): Promise<Qmp> {
    const socket = connect(path);
    const q = new Qmp(socket);
    const greeting = new Promise<unknown>((resolve, reject) => q.waiting.push({ resolve, reject }));
    const timer = setTimeout(() => q.fail(new Error(`QMP did not answer within ${timeoutMs} ms`)), timeoutMs);
    try {
      await greeting;
      await q.execute('qmp_capabilities');
    } catch (e) {
      socket.destroy();
      throw new WarrenError('unavailable', `QEMU's QMP socket does not answer: ${(e as Error).message}`, {}, { cause: e });
    } finally {
      clearTimeout(timer);
    }
    return q;
  }

  /** Runs a command; its `return`, or an error with QEMU's description. */
  execute(command: string, args?: Record<string, unknown>): Promise<unknown> {
    if (this.closed) return Promise.reject(this.closed);
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.socket.write(JSON.stringify(args ? { execute: command, arguments: args } : { execute: command }) + '\n');
    });
  }

  close(): void {
    this.socket.destroy();
  }

  private onData(d: string): void {
    this.buf += d;
    if (this.buf.length > MAX_LINE && !this.buf.includes('\n')) return this.fail(new Error('QMP sent an overlong line'));
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      let msg: { QMP?: unknown; return?: unknown; error?: { class?: string; desc?: string }; event?: string };
      try {
        msg = JSON.parse(line) as typeof msg;
      } catch {
        return this.fail(new Error('QMP sent something that is not JSON'));
      }
      if (msg.event) continue;
      const w = this.waiting.shift();
      if (!w) continue;
      if (msg.error) w.reject(new Error(`${msg.error.class ?? 'Error'}: ${msg.error.desc ?? ''}`));
      else w.resolve(msg.QMP ?? msg.return);
    }
  }

  private fail(e: Error): void {
    this.closed ??= e;
    for (const w of this.waiting.splice(0)) w.reject(e);
  }
}
