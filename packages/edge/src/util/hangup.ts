/**
 * A connection's end, for a stream writer to race each next value against. Promise.race with one
 * promise that lives as long as the connection leaves a reaction on it per race, and each holds
 * the value it raced (every event a stream ever sent, until the connection goes); here one wait
 * at a time holds the signal.
 */
export class Hangup {
  private fired = false;
  private wake: (() => void) | null = null;

  constructor(connection: { once(event: 'close', listener: () => void): unknown }) {
    connection.once('close', () => {
      this.fired = true;
      const w = this.wake;
      this.wake = null;
      w?.();
    });
  }

  /** Whether the connection has gone. */
  get gone(): boolean {
    return this.fired;
  }

  /** What `p` gives, or 'gone' if the connection goes first (one wait at a time). */
  race<T>(p: Promise<T>): Promise<T | 'gone'> {
    if (this.fired) return Promise.resolve('gone');
    return new Promise((resolve, reject) => {
      const wake = (): void => resolve('gone');
      this.wake = wake;
      const settle = (): void => {
        if (this.wake === wake) this.wake = null;
      };
      p.then(
        (v) => {
          settle();
          resolve(v);
        },
        (e: unknown) => {
          settle();
          reject(e instanceof Error ? e : new Error(String(e)));
        },
      );
    });
  }
}
